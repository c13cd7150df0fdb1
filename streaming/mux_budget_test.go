package streaming

// The mux's consumers and budgets: mixed consumers, withheld records,
// negotiation, limits, manual flush, byte budgets and watermarks.

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
	"github.com/velo-go/velo/streaming/internal/mux"
)

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
	testwait.Until(t, "credit in flight to land", func() bool { return cm.N.CreditSent.Load() == pm.N.CreditReceived.Load() })
	for _, mx := range []*mux.Mux{pm, cm} {
		if mx.N.ReaderStall.Load() != 0 || mx.N.CreditLost.Load() != 0 || mx.N.ProtocolErrors.Load() != 0 {
			t.Fatalf("readerStall %d creditLost %d protocolErrors %d", mx.N.ReaderStall.Load(), mx.N.CreditLost.Load(), mx.N.ProtocolErrors.Load())
		}
	}
	t.Logf("%d records in %d batches; credit exhausted %d times", pm.N.RecordsSent.Load(), pm.N.BatchesSent.Load(), pm.N.CreditExhausted.Load())
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
		{"both", on, on, "", mux.WireKey, true},
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
	near := mux.MaxMuxRecord - 64
	size := mux.MaxMuxRecord - (len(bytesItemFrame(make([]byte, near))) - near)
	var tooBig *ItemTooLargeError
	if err := s.Send(ctx, make([]byte, size+1)); !errors.As(err, &tooBig) {
		t.Fatalf("an item of %d bytes, one past the limit: %v", size+1, err)
	}
	if err := s.Send(ctx, make([]byte, size)); err != nil {
		t.Fatalf("an item of %d bytes: %v", size, err)
	}
	v, err := nextItemWithin(t, a, 20*time.Second)
	if err != nil || len(v) != size {
		t.Fatalf("got %d bytes, %v; epoch deaths %d", len(v), err, muxOf(t, producer).N.EpochDeaths.Load())
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
		if q := mx.QueuedRecords(); q != streams {
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
		testwait.Until(t, "the records on credit to be written", func() bool {
			credit, _, _ := slotState(s.slot())
			return credit == 0
		})
	}
	blocked := sendAsync(s2, ctx, item) // 5 KiB queued would be over the peer's 4
	testwait.Until(t, "s2's Send to wait for the peer's budget", func() bool {
		b := s2.slot().B
		b.Mu.Lock()
		defer b.Mu.Unlock()
		return b.Budget.Waiting()
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
	var in *mux.InSlot
	testwait.Until(t, "all 8 records delivered", func() bool {
		sn := a.st.Snapshot()
		in, _ = sn.Feed.(*mux.InSlot)
		return in != nil && sn.Queued == 8
	})
	granted := func() uint32 {
		in.PeerIn.ReconcileDirty()
		in.PeerIn.Mu.Lock()
		defer in.PeerIn.Mu.Unlock()
		return in.Held
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
