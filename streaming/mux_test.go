package streaming

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"testing"
	"time"

	wire "github.com/velo-go/velo/internal/streamwire"
	"github.com/velo-go/velo/transport/tcp"
)

// Tests of the messenger mux: two nodes in one process over loopback TCP,
// the mux on. Every wait is bounded.

// muxNodes makes a producer and a consumer node with the mux on (cfg), the
// producer knowing the consumer.
func muxNodes(t *testing.T, cfg MuxConfig, opts ...ManagerOption) (producer, consumer *remoteNode) {
	t.Helper()
	opts = append([]ManagerOption{WithMux(cfg)}, opts...)
	producer, consumer = newRemoteNode(t, opts...), newRemoteNode(t, opts...)
	if err := producer.msg.RegisterPeer(consumer.msg.PeerInfo()); err != nil {
		t.Fatal(err)
	}
	return producer, consumer
}

// muxOf is the mux of a node; the test fails if the node has none.
func muxOf(t *testing.T, n *remoteNode) *mux {
	t.Helper()
	mx := n.sm.remote.mux
	if mx == nil {
		t.Fatal("the node has no mux")
	}
	return mx
}

// attachMuxT attaches over the mux and checks that the mux was chosen.
func attachMuxT[T any](t *testing.T, producer *remoteNode, h wire.AnchorHandle) *Sender[T] {
	t.Helper()
	s := attachRemoteT[T](t, producer, h)
	if got := s.NegotiatedTransport(); got != muxWireKey {
		t.Fatalf("NegotiatedTransport = %q, want %q", got, muxWireKey)
	}
	return s
}

// muxStream makes an anchor on consumer and attaches producer to it.
func muxStream(t *testing.T, producer, consumer *remoteNode) (*Anchor[[]byte], *Sender[[]byte]) {
	t.Helper()
	a, err := CreateAnchor[[]byte](consumer.sm)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { a.Close() })
	return a, attachMuxT[[]byte](t, producer, a.Handle())
}

func token(i int) []byte { return []byte(fmt.Sprintf("tok-%06d", i)) }

// readTokens reads n tokens in order, each within d.
func readTokens(t *testing.T, a *Anchor[[]byte], from, n int, d time.Duration) {
	t.Helper()
	for i := from; i < from+n; i++ {
		v, err := nextItemWithin(t, a, d)
		if err != nil {
			t.Fatalf("token %d: %v", i, err)
		}
		if !bytes.Equal(v, token(i)) {
			t.Fatalf("token %d = %q", i, v)
		}
	}
}

// sendAsync runs one Send on its own goroutine and reports its result.
func sendAsync(s *Sender[[]byte], ctx context.Context, v []byte) <-chan error {
	ch := make(chan error, 1)
	go func() { ch <- s.Send(ctx, v) }()
	return ch
}

// TestMuxStreamFinalize: N items in order over the mux, a SenderError,
// then io.EOF; the output retires as Sent; a send after Finalize fails.
func TestMuxStreamFinalize(t *testing.T) {
	producer, consumer := muxNodes(t, MuxConfig{})
	a, s := muxStream(t, producer, consumer)
	retired := s.Retired()
	const n = 1000
	ctx := context.Background()
	done := make(chan error, 1)
	go func() { // the consumer reads concurrently: the window is 32
		for i := range n {
			v, err := nextItemWithin(t, a, 5*time.Second)
			if err != nil || !bytes.Equal(v, token(i)) {
				done <- fmt.Errorf("token %d = %q, %v", i, v, err)
				return
			}
		}
		done <- nil
	}()
	for i := range n {
		if err := s.Send(ctx, token(i)); err != nil {
			t.Fatalf("send %d: %v", i, err)
		}
	}
	if err := s.SendError(ctx, "soft"); err != nil {
		t.Fatal(err)
	}
	if err := s.Finalize(); err != nil {
		t.Fatal(err)
	}
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	var se *SenderError
	if _, err := nextItemWithin(t, a, 5*time.Second); !errors.As(err, &se) || se.Message != "soft" {
		t.Fatalf("want the soft error, got %v", err)
	}
	for range 2 {
		if _, err := nextItemWithin(t, a, 5*time.Second); err != io.EOF {
			t.Fatalf("want io.EOF, got %v", err)
		}
	}
	if out := retiredOutcome(t, retired, s); out != RetireSent {
		t.Fatalf("retired %v, want Sent", out)
	}
	if err := s.Send(ctx, []byte("late")); !errors.Is(err, ErrSenderClosed) {
		t.Fatalf("send after Finalize: %v", err)
	}
	mx := muxOf(t, consumer)
	if mx.n.readerStall.Load() != 0 || mx.n.protocolErrors.Load() != 0 {
		t.Fatalf("readerStall %d, protocolErrors %d", mx.n.readerStall.Load(), mx.n.protocolErrors.Load())
	}
}

// queued is how many records wait in the anchor's inlet.
func queued(st *anchorState) int {
	st.mu.Lock()
	defer st.mu.Unlock()
	return st.q.n
}

// slotState reads the producer side of a mux slot under its lock.
func slotState(s *outSlot) (credit uint32, q int, waiting bool) {
	s.b.mu.Lock()
	defer s.b.mu.Unlock()
	return s.credit, len(s.q), s.spaceWait != nil
}

// fill sends n tokens from first, each of which must not wait long.
func fill(t *testing.T, s *Sender[[]byte], first, n int) {
	t.Helper()
	for i := first; i < first+n; i++ {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		err := s.Send(ctx, token(i))
		cancel()
		if err != nil {
			t.Fatalf("send %d: %v", i, err)
		}
	}
}

// fillAsync sends n tokens from first on its own goroutine; the channel
// gets the first error or nil.
func fillAsync(s *Sender[[]byte], first, n int) <-chan error {
	ch := make(chan error, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		for i := first; i < first+n; i++ {
			if err := s.Send(ctx, token(i)); err != nil {
				ch <- fmt.Errorf("send %d: %w", i, err)
				return
			}
		}
		ch <- nil
	}()
	return ch
}

// TestMuxCreditHoldsProducer: a consumer that does not read holds its
// producer to C records delivered plus the slot's inlet of C+1; the next
// Send waits and resumes when the consumer reads. No credit is lost: the
// producer's window is back to C when everything was read, and the
// credit the consumer sent is the credit the producer received.
func TestMuxCreditHoldsProducer(t *testing.T) {
	const c = 4
	producer, consumer := muxNodes(t, MuxConfig{InitialCredit: c})
	a, s := muxStream(t, producer, consumer)
	fill(t, s, 0, 2*c+1)
	waitFor(t, "C records delivered", func() bool { return queued(&a.st) == c })
	blocked := sendAsync(s, context.Background(), token(2*c+1))
	waitFor(t, "the next Send to wait", func() bool { _, _, w := slotState(s.slot()); return w })
	select {
	case err := <-blocked:
		t.Fatalf("Send past the window returned %v", err)
	default:
	}
	if got := queued(&a.st); got != c {
		t.Fatalf("%d records delivered to a consumer that does not read, want C=%d", got, c)
	}
	readTokens(t, a, 0, 1, 5*time.Second)
	select {
	case err := <-blocked:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the Send did not resume after the consumer read")
	}
	const n = 200
	sent := fillAsync(s, 2*c+2, n-(2*c+2))
	readTokens(t, a, 1, n-1, 5*time.Second)
	if err := <-sent; err != nil {
		t.Fatal(err)
	}
	pm, cm := muxOf(t, producer), muxOf(t, consumer)
	waitFor(t, "the window back to C", func() bool { cr, q, _ := slotState(s.slot()); return cr == c && q == 0 })
	if sent, got := cm.n.creditSent.Load(), pm.n.creditReceived.Load(); sent != got || sent < n {
		t.Fatalf("credit sent %d, received %d, for %d tokens", sent, got, n)
	}
	if err := s.Finalize(); err != nil {
		t.Fatal(err)
	}
	if _, err := nextItemWithin(t, a, 5*time.Second); err != io.EOF {
		t.Fatalf("want io.EOF, got %v", err)
	}
	if cm.n.readerStall.Load() != 0 || cm.n.creditLost.Load() != 0 || cm.n.protocolErrors.Load() != 0 {
		t.Fatalf("readerStall %d creditLost %d protocolErrors %d", cm.n.readerStall.Load(), cm.n.creditLost.Load(), cm.n.protocolErrors.Load())
	}
}

// TestMuxTerminalAtCreditOne: at credit 1 with the slot's inlet full,
// Finalize and Close return at once, and the terminal lands behind every
// record (it spends the reserved credit).
func TestMuxTerminalAtCreditOne(t *testing.T) {
	producer, consumer := muxNodes(t, MuxConfig{InitialCredit: 1})
	for _, finalize := range []bool{true, false} {
		a, s := muxStream(t, producer, consumer)
		fill(t, s, 0, 3) // one delivered, two in the inlet of C+1
		waitFor(t, "the inlet to fill", func() bool { _, q, _ := slotState(s.slot()); return q == 2 })
		start := time.Now()
		end, want := s.Close, error(ErrSenderDropped)
		if finalize {
			end, want = s.Finalize, io.EOF
		}
		if err := end(); err != nil {
			t.Fatal(err)
		}
		if d := time.Since(start); d > 50*time.Millisecond {
			t.Fatalf("ending with a full inlet took %v", d)
		}
		readTokens(t, a, 0, 3, 5*time.Second)
		if _, err := nextItemWithin(t, a, 5*time.Second); !errors.Is(err, want) {
			t.Fatalf("want %v, got %v", want, err)
		}
	}
}

// TestMuxNoHeadOfLineBlocking: three streams to one peer share its
// batcher; one consumer stops reading, and the other two still get every
// token. The ingress never stalls and loses no credit.
func TestMuxNoHeadOfLineBlocking(t *testing.T) {
	producer, consumer := muxNodes(t, MuxConfig{InitialCredit: 4})
	stuck, stuckS := muxStream(t, producer, consumer)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	stalled := make(chan error, 1)
	go func() { // runs into the window and waits there
		for i := 0; ; i++ {
			if err := stuckS.Send(ctx, token(i)); err != nil {
				stalled <- err
				return
			}
		}
	}()
	waitFor(t, "the stopped consumer's producer to wait", func() bool { _, _, w := slotState(stuckS.slot()); return w })
	const n = 2000
	var ends []<-chan error
	for range 2 {
		a, s := muxStream(t, producer, consumer)
		ends = append(ends, fillAsync(s, 0, n))
		done := make(chan error, 1)
		ends = append(ends, done)
		go func() {
			for i := range n {
				ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
				v, err := a.Next(ctx)
				cancel()
				if err != nil || !bytes.Equal(v, token(i)) {
					done <- fmt.Errorf("token %d = %q, %v", i, v, err)
					return
				}
			}
			done <- nil
		}()
	}
	for _, ch := range ends {
		select {
		case err := <-ch:
			if err != nil {
				t.Fatal(err)
			}
		case <-time.After(20 * time.Second):
			t.Fatal("a stream behind the stopped consumer did not finish")
		}
	}
	if got := queued(&stuck.st); got != 4 {
		t.Fatalf("the stopped consumer holds %d records, want C=4", got)
	}
	cancel()
	if err := <-stalled; !errors.Is(err, context.Canceled) {
		t.Fatalf("the stalled Send ended with %v", err)
	}
	for _, mx := range []*mux{muxOf(t, producer), muxOf(t, consumer)} {
		if mx.n.readerStall.Load() != 0 || mx.n.creditLost.Load() != 0 || mx.n.protocolErrors.Load() != 0 {
			t.Fatalf("readerStall %d creditLost %d protocolErrors %d", mx.n.readerStall.Load(), mx.n.creditLost.Load(), mx.n.protocolErrors.Load())
		}
	}
}

// TestMuxCancelWakesBlockedSend: the consumer's Cancel reaches a producer
// waiting in Send for credit: the Send fails with ErrCancelled.
func TestMuxCancelWakesBlockedSend(t *testing.T) {
	producer, consumer := muxNodes(t, MuxConfig{InitialCredit: 2})
	a, s := muxStream(t, producer, consumer)
	fill(t, s, 0, 5) // 2 delivered, 3 in the inlet
	blocked := sendAsync(s, context.Background(), token(5))
	waitFor(t, "the Send to wait", func() bool { _, _, w := slotState(s.slot()); return w })
	a.Controller().Cancel()
	select {
	case err := <-blocked:
		if !errors.Is(err, ErrCancelled) {
			t.Fatalf("the blocked Send ended with %v, want ErrCancelled", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the cancel did not reach the blocked Send")
	}
	if !isClosed(s.Done()) || !isClosed(s.Cancelled()) {
		t.Fatal("Done and Cancelled did not close with the cancel")
	}
	if isClosed(s.Stopped()) {
		t.Fatal("Stopped closed with a cancel")
	}
}

// TestMuxCloseReachesIdleProducer: Anchor.Close reaches a producer that
// sends nothing more: Cancelled closes.
func TestMuxCloseReachesIdleProducer(t *testing.T) {
	producer, consumer := muxNodes(t, MuxConfig{})
	a, s := muxStream(t, producer, consumer)
	if err := s.Send(context.Background(), token(0)); err != nil {
		t.Fatal(err)
	}
	readTokens(t, a, 0, 1, 5*time.Second)
	a.Close()
	select {
	case <-s.Cancelled():
	case <-time.After(5 * time.Second):
		t.Fatal("Anchor.Close did not reach the idle producer")
	}
	if err := s.Send(context.Background(), token(1)); !errors.Is(err, ErrCancelled) {
		t.Fatalf("send after the close: %v", err)
	}
}

// killableNode is a mux node whose TCP transport the test can shut down,
// closing every connection as the kernel does for a killed process.
func killableNode(t *testing.T) (*remoteNode, *tcp.Transport) {
	t.Helper()
	msg, tr := newMessengerTCP(t)
	return muxNodeOn(t, msg), tr
}

// streamEnd is how one consumer's stream ended.
type streamEnd struct {
	err  error
	at   time.Time
	read int
}

// consumeUntilEnd reads tokens in order until the stream ends, and
// reports the end; a token out of order or repeated is an error.
func consumeUntilEnd(a *Anchor[[]byte], out chan<- streamEnd) {
	for i := 0; ; i++ {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		v, err := a.Next(ctx)
		cancel()
		if err != nil {
			out <- streamEnd{err, time.Now(), i}
			return
		}
		if !bytes.Equal(v, token(i)) {
			out <- streamEnd{fmt.Errorf("token %d = %q: duplicated or reordered", i, v), time.Now(), i}
			return
		}
	}
}

// TestMuxPeerLoss: the producer's node goes away in three ways while
// streams are open and tokens in flight; every open mux stream on the
// consumer ends with ErrSenderDropped, promptly, with no token duplicated
// or reordered before the end.
func TestMuxPeerLoss(t *testing.T) {
	const streams = 16
	ways := []struct {
		name string
		kill func(p *remoteNode, tr *tcp.Transport)
	}{
		{"manager-close", func(p *remoteNode, _ *tcp.Transport) { p.sm.Close() }},
		{"connections-close", func(_ *remoteNode, tr *tcp.Transport) { tr.Shutdown() }},
		{"messenger-shutdown", func(p *remoteNode, _ *tcp.Transport) {
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			p.msg.Shutdown(ctx)
		}},
	}
	for _, way := range ways {
		t.Run(way.name, func(t *testing.T) {
			producer, tr := killableNode(t)
			consumer, _ := killableNode(t)
			if err := producer.msg.RegisterPeer(consumer.msg.PeerInfo()); err != nil {
				t.Fatal(err)
			}
			ends := make(chan streamEnd, streams)
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			var retired []*Sender[[]byte]
			for range streams {
				a, s := muxStream(t, producer, consumer)
				// Open on the consumer: a pipelined attach whose request
				// the loss swallows never bound anything there.
				if err := s.Ready(ctx); err != nil {
					t.Fatal(err)
				}
				retired = append(retired, s)
				go consumeUntilEnd(a, ends)
				go func() { // sends until the stream fails
					for i := 0; ctx.Err() == nil; i++ {
						if s.Send(ctx, token(i)) != nil {
							return
						}
					}
				}()
			}
			waitFor(t, "tokens to flow", func() bool { return muxOf(t, consumer).n.recordsRecv.Load() > 10*streams })
			killed := time.Now()
			way.kill(producer, tr)
			var worst time.Duration
			for range streams {
				select {
				case e := <-ends:
					if !errors.Is(e.err, ErrSenderDropped) {
						t.Fatalf("a stream ended with %v after %d tokens, want ErrSenderDropped", e.err, e.read)
					}
					worst = max(worst, e.at.Sub(killed))
				case <-time.After(30 * time.Second):
					t.Fatal("an open stream did not end after its producer's node went away")
				}
			}
			t.Logf("%s: the last of %d streams ended %v after the loss", way.name, streams, worst)
			if worst > 100*time.Millisecond {
				t.Errorf("the last stream ended %v after the loss, want within 100ms", worst)
			}
			// The producer hears of the loss too: by the messenger's peer
			// loss, by a refused batch, or at the latest by the batcher's
			// health check, once per heartbeat window (a node whose own
			// transport shut down is not told of a peer loss).
			for _, s := range retired {
				select {
				case <-s.Cancelled():
				case <-time.After(2*defaultHeartbeatInterval + 2*time.Second):
					t.Fatal("a producer was not cancelled by the loss")
				}
			}
			if way.name != "manager-close" {
				return
			}
			for _, s := range retired { // the producer's node tore down: its output is lost
				s.Finalize()
				if out := retiredOutcome(t, s.Retired(), s); out != RetireDiscarded {
					t.Fatalf("retired %v after the producer's Manager closed, want Discarded", out)
				}
			}
		})
	}
}

// TestMuxConsumerNodeClose: the consumer's Manager closes while its
// messenger stays up; the producers hear of it at once (Cancelled), a
// Send waiting for credit fails with ErrCancelled, and an idle producer
// is cancelled too, even one whose OpenSlot reaches the consumer only
// after its mux closed.
func TestMuxConsumerNodeClose(t *testing.T) {
	producer, consumer := muxNodes(t, MuxConfig{InitialCredit: 2})
	_, busy := muxStream(t, producer, consumer)
	_, idle := muxStream(t, producer, consumer)
	fill(t, busy, 0, 5)
	blocked := sendAsync(busy, context.Background(), token(5))
	waitFor(t, "the Send to wait", func() bool { _, _, w := slotState(busy.slot()); return w })
	closed := time.Now()
	consumer.sm.Close()
	for _, s := range []*Sender[[]byte]{busy, idle} {
		select {
		case <-s.Cancelled():
		case <-time.After(5 * time.Second):
			t.Fatalf("the producer did not hear that its consumer's node closed (busy: %v)", s == busy)
		}
	}
	t.Logf("producers cancelled %v after the consumer's Manager closed", time.Since(closed))
	select {
	case err := <-blocked:
		if !errors.Is(err, ErrCancelled) {
			t.Fatalf("the waiting Send ended with %v", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the waiting Send did not end")
	}
}

// TestMuxTeardown: after streams end every way (Finalize, Close, the
// consumer's cancel, Detach then Finalize), no slot is live on either
// side; closing both Managers stops every batcher and the sweepers.
func TestMuxTeardown(t *testing.T) {
	producer, consumer := muxNodes(t, MuxConfig{})
	ctx := context.Background()
	for way := range 4 {
		a, s := muxStream(t, producer, consumer)
		fill(t, s, 0, 3)
		readTokens(t, a, 0, 3, 5*time.Second)
		var want error
		switch way {
		case 0:
			s.Finalize()
			want = io.EOF
		case 1:
			s.Close()
			want = ErrSenderDropped
		case 2:
			a.Controller().Cancel()
			select {
			case <-s.Cancelled():
			case <-time.After(5 * time.Second):
				t.Fatal("cancel did not reach the producer")
			}
			want = ErrCancelled
		case 3:
			s.Detach()
			waitFor(t, "the detach to land", func() bool {
				s2, err := attachReady(ctx, producer.sm, a.Handle())
				if err != nil {
					return false
				}
				s2.Finalize()
				return true
			})
			want = io.EOF
		}
		if _, err := nextItemWithin(t, a, 5*time.Second); !errors.Is(err, want) {
			t.Fatalf("way %d: want %v, got %v", way, want, err)
		}
		a.Close()
	}
	pm, cm := muxOf(t, producer), muxOf(t, consumer)
	for _, mx := range []*mux{pm, cm} {
		waitFor(t, "no live slot", func() bool { out, in := mx.liveSlots(); return out == 0 && in == 0 })
		// Closes that cross a stream's own end are the ordinary race of a
		// retired generation: dropped, not counted as refused.
		if n := mx.n.controlRefused.Load(); n != 0 {
			t.Errorf("control refused %d times on ordinary stream ends", n)
		}
	}
	bs := append(pm.allBatchers(), cm.allBatchers()...)
	if len(bs) == 0 {
		t.Fatal("no batcher to watch")
	}
	producer.sm.Close()
	consumer.sm.Close()
	for _, b := range bs {
		select {
		case <-b.done:
		case <-time.After(5 * time.Second):
			t.Fatal("a batcher's goroutine outlived its Manager")
		}
	}
	for _, mx := range []*mux{pm, cm} {
		if n := len(mx.allBatchers()); n != 0 {
			t.Fatalf("%d batchers after close", n)
		}
		if out, in := mx.liveSlots(); out != 0 || in != 0 {
			t.Fatalf("live slots %d out, %d in after close", out, in)
		}
	}
}

// readAll reads n tokens in order then the end, pausing pause after each
// (a slow consumer), and reports the first fault.
func readAll(a *Anchor[[]byte], n int, pause time.Duration) <-chan error {
	ch := make(chan error, 1)
	go func() {
		for i := range n {
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			v, err := a.Next(ctx)
			cancel()
			if err != nil || !bytes.Equal(v, token(i)) {
				ch <- fmt.Errorf("token %d = %q, %v", i, v, err)
				return
			}
			if pause > 0 {
				time.Sleep(pause) // pacing only: no outcome waits on it
			}
		}
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if _, err := a.Next(ctx); err != io.EOF {
			ch <- fmt.Errorf("after %d tokens: %v, want io.EOF", n, err)
			return
		}
		ch <- nil
	}()
	return ch
}

// TestMuxMixedConsumers: slow, fast and stopped consumers share one peer;
// every stream but the stopped one delivers all its tokens in order, the
// ingress never stalls, no credit is lost, and the credit the consumer
// sent is what the producer received.
func TestMuxMixedConsumers(t *testing.T) {
	producer, consumer := muxNodes(t, MuxConfig{InitialCredit: 8})
	stuck, stuckS := muxStream(t, producer, consumer)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() {
		for i := 0; stuckS.Send(ctx, token(i)) == nil; i++ {
		}
	}()
	type kind struct {
		streams, tokens int
		pause           time.Duration
	}
	var ends []<-chan error
	for _, k := range []kind{{8, 1000, 0}, {4, 100, 200 * time.Microsecond}} {
		for range k.streams {
			a, s := muxStream(t, producer, consumer)
			ends = append(ends, readAll(a, k.tokens, k.pause))
			sent, done := fillAsync(s, 0, k.tokens), make(chan error, 1)
			ends = append(ends, done)
			go func() {
				err := <-sent
				if err == nil {
					err = s.Finalize()
				}
				done <- err
			}()
		}
	}
	for _, ch := range ends {
		select {
		case err := <-ch:
			if err != nil {
				t.Fatal(err)
			}
		case <-time.After(30 * time.Second):
			t.Fatal("a stream sharing the peer with a stopped consumer did not finish")
		}
	}
	if got := queued(&stuck.st); got != 8 {
		t.Fatalf("the stopped consumer holds %d records, want C=8", got)
	}
	pm, cm := muxOf(t, producer), muxOf(t, consumer)
	waitFor(t, "credit in flight to land", func() bool { return cm.n.creditSent.Load() == pm.n.creditReceived.Load() })
	for _, mx := range []*mux{pm, cm} {
		if mx.n.readerStall.Load() != 0 || mx.n.creditLost.Load() != 0 || mx.n.protocolErrors.Load() != 0 {
			t.Fatalf("readerStall %d creditLost %d protocolErrors %d", mx.n.readerStall.Load(), mx.n.creditLost.Load(), mx.n.protocolErrors.Load())
		}
	}
	t.Logf("%d records in %d batches; credit exhausted %d times", pm.n.recordsSent.Load(), pm.n.batchesSent.Load(), pm.n.creditExhausted.Load())
}

// TestMuxDetachWithWithheldRecords: a producer detaches while records wait
// for credit; the Detached terminal lands behind them, and a producer that
// re-attaches at once puts nothing ahead of them.
func TestMuxDetachWithWithheldRecords(t *testing.T) {
	const c = 2
	producer, consumer := muxNodes(t, MuxConfig{InitialCredit: c})
	a, s1 := muxStream(t, producer, consumer)
	fill(t, s1, 0, 2*c+1) // C delivered, C+1 withheld
	if err := s1.Detach(); err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	reattached := make(chan *Sender[[]byte], 1)
	go func() { // retries while the owner has not seen the Detached frame
		deadline := time.Now().Add(10 * time.Second)
		for time.Now().Before(deadline) {
			s2, err := attachReady(ctx, producer.sm, a.Handle())
			if err == nil {
				reattached <- s2
				return
			}
			time.Sleep(time.Millisecond)
		}
		reattached <- nil
	}()
	readTokens(t, a, 0, 2*c+1, 5*time.Second) // the reader frees credit; the detach lands
	s2 := <-reattached
	if s2 == nil {
		t.Fatal("re-attach failed")
	}
	defer s2.Close()
	fill(t, s2, 2*c+1, 3)
	s2.Finalize()
	readTokens(t, a, 2*c+1, 3, 5*time.Second)
	if _, err := nextItemWithin(t, a, 5*time.Second); err != io.EOF {
		t.Fatalf("want io.EOF, got %v", err)
	}
}

// TestMuxNegotiation: the mux is chosen only when both ends have it; a
// node with it off (by config or by VELO_MESSENGER_MUX_DISABLE) meets the
// other on tcp-stream, and the stream works either way.
func TestMuxNegotiation(t *testing.T) {
	on, off := WithMux(MuxConfig{}), WithMux(MuxConfig{Disabled: true})
	cases := []struct {
		name           string
		prod, cons     ManagerOption
		env            string
		want           string
		wantProducerMx bool
	}{
		{"both", on, on, "", muxWireKey, true},
		{"owner-off", on, off, "", wire.TCPStreamKey, true},
		{"producer-off", off, on, "", wire.TCPStreamKey, false},
		{"env-off", on, on, "yes", wire.TCPStreamKey, false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			if tc.env != "" {
				t.Setenv(muxDisableEnv, tc.env)
			}
			producer, consumer := newRemoteNode(t, tc.prod), newRemoteNode(t, tc.cons)
			if err := producer.msg.RegisterPeer(consumer.msg.PeerInfo()); err != nil {
				t.Fatal(err)
			}
			if got := producer.sm.remote.mux != nil; got != tc.wantProducerMx {
				t.Fatalf("producer has a mux: %v", got)
			}
			a, err := CreateAnchor[[]byte](consumer.sm)
			if err != nil {
				t.Fatal(err)
			}
			defer a.Close()
			s := attachRemoteT[[]byte](t, producer, a.Handle())
			if got := s.NegotiatedTransport(); got != tc.want {
				t.Fatalf("NegotiatedTransport = %q, want %q", got, tc.want)
			}
			fill(t, s, 0, 3)
			s.Finalize()
			readTokens(t, a, 0, 3, 5*time.Second)
			if _, err := nextItemWithin(t, a, 5*time.Second); err != io.EOF {
				t.Fatalf("want io.EOF, got %v", err)
			}
		})
	}
}

// TestMuxItemAtLimit: the largest item the mux accepts gets through the
// messenger (a refusal would be epoch death for every stream to the peer).
func TestMuxItemAtLimit(t *testing.T) {
	producer, consumer := muxNodes(t, MuxConfig{})
	a, s := muxStream(t, producer, consumer)
	ctx := context.Background()
	// The largest payload whose frame Send accepts: the frame's overhead
	// is the same for any payload near the limit.
	near := maxMuxRecord - 64
	size := maxMuxRecord - (len(bytesItemFrame(make([]byte, near))) - near)
	var tooBig *ItemTooLargeError
	if err := s.Send(ctx, make([]byte, size+1)); !errors.As(err, &tooBig) {
		t.Fatalf("an item of %d bytes, one past the limit: %v", size+1, err)
	}
	if err := s.Send(ctx, make([]byte, size)); err != nil {
		t.Fatalf("an item of %d bytes: %v", size, err)
	}
	v, err := nextItemWithin(t, a, 20*time.Second)
	if err != nil || len(v) != size {
		t.Fatalf("got %d bytes, %v; epoch deaths %d", len(v), err, muxOf(t, producer).n.epochDeaths.Load())
	}
}

// TestMuxManualFlushReleasesOnlyStaged: under FlushManual, FlushBatch
// releases what each slot held at the call; a token staged right after it
// waits for the next call, so one call writes one pass.
func TestMuxManualFlushReleasesOnlyStaged(t *testing.T) {
	producer, consumer := muxNodes(t, MuxConfig{Flush: FlushManual})
	const streams = 20
	var anchors []*Anchor[[]byte]
	var senders []*Sender[[]byte]
	for range streams {
		a, s := muxStream(t, producer, consumer)
		anchors, senders = append(anchors, a), append(senders, s)
	}
	ctx := context.Background()
	for pass := range 3 {
		for _, s := range senders {
			if err := s.Send(ctx, token(pass)); err != nil {
				t.Fatal(err)
			}
		}
		producer.sm.FlushBatch()
		for _, s := range senders { // the next pass, staged at once
			if err := s.Send(ctx, token(pass+100)); err != nil {
				t.Fatal(err)
			}
		}
		for _, a := range anchors {
			readTokens(t, a, pass, 1, 5*time.Second)
		}
		// Every stream got this pass's token, and the batcher is done with
		// that call: the tokens staged after it are all still queued.
		mx := muxOf(t, producer)
		if q := mx.queuedRecords(); q != streams {
			t.Fatalf("pass %d: %d records queued after the flush, want %d (the ones staged after it)", pass, q, streams)
		}
		producer.sm.FlushBatch()
		for _, a := range anchors {
			readTokens(t, a, pass+100, 1, 5*time.Second)
		}
	}
}

// TestMuxPeerByteBudget: the bytes queued on all the slots to one peer are
// capped; a Send of another stream waits for room on the peer (its first
// record always goes) and resumes when a consumer reads.
func TestMuxPeerByteBudget(t *testing.T) {
	const rec = 1024
	producer, consumer := muxNodes(t, MuxConfig{InitialCredit: 8, PeerByteBudget: 4 * rec})
	a, s1 := muxStream(t, producer, consumer)
	_, s2 := muxStream(t, producer, consumer)
	ctx := context.Background()
	item := make([]byte, rec)
	for range 8 + 3 { // 8 in flight on credit, 3 queued (3 KiB)
		if err := s1.Send(ctx, item); err != nil {
			t.Fatal(err)
		}
	}
	for range 8 + 1 { // 8 on credit; the 9th is queued: a slot's first queued record always fits
		if err := s2.Send(ctx, item); err != nil {
			t.Fatal(err)
		}
	}
	for _, s := range []*Sender[[]byte]{s1, s2} {
		waitFor(t, "the records on credit to be written", func() bool {
			credit, _, _ := slotState(s.slot())
			return credit == 0
		})
	}
	blocked := sendAsync(s2, ctx, item) // 5 KiB queued would be over the peer's 4
	waitFor(t, "s2's Send to wait for the peer's budget", func() bool {
		b := s2.slot().b
		b.mu.Lock()
		defer b.mu.Unlock()
		return b.budget.waiting()
	})
	select {
	case err := <-blocked:
		t.Fatalf("a Send over the peer's byte budget returned %v", err)
	default:
	}
	for range 4 { // credit returns, s1's queue drains, the peer has room
		if _, err := nextItemWithin(t, a, 5*time.Second); err != nil {
			t.Fatal(err)
		}
	}
	select {
	case err := <-blocked:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the Send did not resume when the peer had room")
	}
}

// TestMuxConsumerByteWatermark: a consumer holding more than the slot's
// byte budget of delivered records gets no grant for what it takes until
// it is back under the budget; then the whole count goes at once.
func TestMuxConsumerByteWatermark(t *testing.T) {
	const rec = 2048
	producer, consumer := muxNodes(t, MuxConfig{InitialCredit: 8, SlotByteBudget: 4 * rec})
	a, s := muxStream(t, producer, consumer)
	ctx := context.Background()
	for range 8 {
		if err := s.Send(ctx, make([]byte, rec)); err != nil {
			t.Fatal(err)
		}
	}
	var in *inSlot
	waitFor(t, "all 8 records delivered", func() bool {
		a.st.mu.Lock()
		defer a.st.mu.Unlock()
		in = a.st.feed
		return in != nil && a.st.q.n == 8
	})
	granted := func() uint32 {
		in.ip.reconcileDirty()
		in.ip.mu.Lock()
		defer in.ip.mu.Unlock()
		return in.held
	}
	for i := 1; i <= 6; i++ { // 8 delivered; take them one by one
		if _, err := nextItemWithin(t, a, 5*time.Second); err != nil {
			t.Fatal(err)
		}
		// Each record is 2 KiB plus an 11-byte frame header, so with
		// four or more left the slot is over its 8 KiB budget and nothing
		// is granted; at three left every take so far goes at once.
		want := uint32(0)
		if 8-i < 4 {
			want = uint32(i)
		}
		if got := granted(); got != want {
			t.Fatalf("after %d takes the producer holds %d credit, want %d", i, got, want)
		}
	}
}

// attachReady attaches and waits for the owner's answer, as a caller that
// retries an attach must: a pipelined attach reports a refusal later.
func attachReady(ctx context.Context, m *Manager, h wire.AnchorHandle) (*Sender[[]byte], error) {
	s, err := AttachAnchor[[]byte](ctx, m, h)
	if err != nil {
		return nil, err
	}
	if err := s.Ready(ctx); err != nil {
		s.Close()
		return nil, err
	}
	return s, nil
}

// TestMuxFinalizeAfterPeerCancelWithWatcher: a producer that watches
// Retired, is cancelled by the consumer and then finalizes gets
// ErrCancelled and one Discarded outcome (the end settled it; the
// Finalize once closed the watchers' channel a second time and panicked).
func TestMuxFinalizeAfterPeerCancelWithWatcher(t *testing.T) {
	producer, consumer := muxNodes(t, MuxConfig{})
	a, s := muxStream(t, producer, consumer)
	retired := s.Retired()
	a.Controller().Cancel()
	select {
	case <-s.Cancelled():
	case <-time.After(5 * time.Second):
		t.Fatal("cancel did not reach the producer")
	}
	if err := s.Finalize(); !errors.Is(err, ErrCancelled) {
		t.Fatalf("Finalize: %v, want ErrCancelled", err)
	}
	if out := retiredOutcome(t, retired, s); out != RetireDiscarded {
		t.Fatalf("outcome %v, want Discarded", out)
	}
}
