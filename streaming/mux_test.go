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
	"github.com/velo-go/velo/internal/testwait"
	"github.com/velo-go/velo/streaming/internal/inlet"
	"github.com/velo-go/velo/streaming/internal/mux"
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
func muxOf(t *testing.T, n *remoteNode) *mux.Mux {
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
	if got := s.NegotiatedTransport(); got != mux.WireKey {
		t.Fatalf("NegotiatedTransport = %q, want %q", got, mux.WireKey)
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
	if mx.N.ReaderStall.Load() != 0 || mx.N.ProtocolErrors.Load() != 0 {
		t.Fatalf("readerStall %d, protocolErrors %d", mx.N.ReaderStall.Load(), mx.N.ProtocolErrors.Load())
	}
}

// queued is how many records wait in the anchor's inlet.
func queued(st *inlet.State) int {
	return st.Snapshot().Queued
}

// slotState reads the producer side of a mux slot under its lock.
func slotState(s *mux.OutSlot) (credit uint32, q int, waiting bool) {
	s.B.Mu.Lock()
	defer s.B.Mu.Unlock()
	return s.Credit, len(s.Q), s.SpaceWait != nil
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
	testwait.Until(t, "C records delivered", func() bool { return queued(&a.st) == c })
	blocked := sendAsync(s, context.Background(), token(2*c+1))
	testwait.Until(t, "the next Send to wait", func() bool { _, _, w := slotState(s.slot()); return w })
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
	testwait.Until(t, "the window back to C", func() bool { cr, q, _ := slotState(s.slot()); return cr == c && q == 0 })
	if sent, got := cm.N.CreditSent.Load(), pm.N.CreditReceived.Load(); sent != got || sent < n {
		t.Fatalf("credit sent %d, received %d, for %d tokens", sent, got, n)
	}
	if err := s.Finalize(); err != nil {
		t.Fatal(err)
	}
	if _, err := nextItemWithin(t, a, 5*time.Second); err != io.EOF {
		t.Fatalf("want io.EOF, got %v", err)
	}
	if cm.N.ReaderStall.Load() != 0 || cm.N.CreditLost.Load() != 0 || cm.N.ProtocolErrors.Load() != 0 {
		t.Fatalf("readerStall %d creditLost %d protocolErrors %d", cm.N.ReaderStall.Load(), cm.N.CreditLost.Load(), cm.N.ProtocolErrors.Load())
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
		testwait.Until(t, "the inlet to fill", func() bool { _, q, _ := slotState(s.slot()); return q == 2 })
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
	testwait.Until(t, "the stopped consumer's producer to wait", func() bool { _, _, w := slotState(stuckS.slot()); return w })
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
	for _, mx := range []*mux.Mux{muxOf(t, producer), muxOf(t, consumer)} {
		if mx.N.ReaderStall.Load() != 0 || mx.N.CreditLost.Load() != 0 || mx.N.ProtocolErrors.Load() != 0 {
			t.Fatalf("readerStall %d creditLost %d protocolErrors %d", mx.N.ReaderStall.Load(), mx.N.CreditLost.Load(), mx.N.ProtocolErrors.Load())
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
	testwait.Until(t, "the Send to wait", func() bool { _, _, w := slotState(s.slot()); return w })
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
