package streaming

import (
	"context"
	"os"
	"runtime"
	"strconv"
	"testing"
	"time"

	"github.com/velo-go/velo/internal/testwait"
	"github.com/velo-go/velo/metrics"
	"github.com/velo-go/velo/streaming/internal/mux"
)

// Counting tests of the mux: what many streams cost in goroutines and
// connections, and what one record costs in allocations.

// openFDs counts this process's open file descriptors.
func openFDs(t *testing.T) int {
	t.Helper()
	ents, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		t.Skipf("no /proc/self/fd: %v", err)
	}
	return len(ents)
}

// TestMuxManyStreamsShareConnections: 1,000 (VELO_MUX_STREAMS) concurrent
// mux streams between two nodes add no goroutine and no connection per
// stream, and every token arrives in order.
func TestMuxManyStreamsShareConnections(t *testing.T) {
	producer, consumer := muxNodes(t, MuxConfig{})
	ctx := context.Background()
	// A first stream sets up the connections, batchers and workers.
	a0, s0 := muxStream(t, producer, consumer)
	fill(t, s0, 0, 1)
	readTokens(t, a0, 0, 1, 5*time.Second)
	s0.Finalize()
	nextItemWithin(t, a0, 5*time.Second)
	const slack = 8 // messenger handler workers come and go
	g0, fd0 := runtime.NumGoroutine(), openFDs(t)
	n, tokens := 1000, 10
	if v, err := strconv.Atoi(os.Getenv("VELO_MUX_STREAMS")); err == nil && v > 0 {
		n = v // the book's figure is 10,000: VELO_MUX_STREAMS=10000
	}
	anchors := make([]*Anchor[[]byte], n)
	senders := make([]*Sender[[]byte], n)
	for i := range n {
		anchors[i], senders[i] = muxStream(t, producer, consumer)
		if err := senders[i].Send(ctx, token(0)); err != nil {
			t.Fatal(err)
		}
	}
	for i := range n {
		readTokens(t, anchors[i], 0, 1, 5*time.Second)
	}
	g1, fd1 := runtime.NumGoroutine(), openFDs(t)
	t.Logf("%d live mux streams: goroutines %d -> %d, open fds %d -> %d", n, g0, g1, fd0, fd1)
	if g1 > g0+slack {
		t.Errorf("%d live mux streams added %d goroutines, want at most %d", n, g1-g0, slack)
	}
	if fd1 > fd0+4 {
		t.Errorf("%d live mux streams added %d file descriptors, want at most 4", n, fd1-fd0)
	}
	// Every stream sends the rest at once, interleaved on the batcher.
	for i := range n {
		fill(t, senders[i], 1, tokens-1)
		if err := senders[i].Finalize(); err != nil {
			t.Fatal(err)
		}
	}
	for i := range n {
		readTokens(t, anchors[i], 1, tokens-1, 5*time.Second)
		if _, err := nextItemWithin(t, anchors[i], 5*time.Second); err == nil {
			t.Fatalf("stream %d: no end after its tokens", i)
		}
	}
	for _, mx := range []*mux.Mux{muxOf(t, producer), muxOf(t, consumer)} {
		testwait.Until(t, "no live slot", func() bool { out, in := mx.LiveSlots(); return out == 0 && in == 0 })
		if mx.N.ReaderStall.Load() != 0 || mx.N.CreditLost.Load() != 0 || mx.N.ProtocolErrors.Load() != 0 {
			t.Fatalf("readerStall %d creditLost %d protocolErrors %d", mx.N.ReaderStall.Load(), mx.N.CreditLost.Load(), mx.N.ProtocolErrors.Load())
		}
	}
	pm := muxOf(t, producer)
	t.Logf("producer: %d records in %d batches", pm.N.RecordsSent.Load(), pm.N.BatchesSent.Load())
}

// TestMuxAllocsPerRecord: allocations of one Send and one Next of a
// []byte item over a warm mux stream (both nodes' work, the messenger's
// included, since AllocsPerRun counts the whole process).
func TestMuxAllocsPerRecord(t *testing.T) {
	producer, consumer := muxNodes(t, MuxConfig{})
	a, s := muxStream(t, producer, consumer)
	// One deadline for the whole run: a context per Next would count its
	// own allocations (five) against the mux.
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	payload := make([]byte, 40)
	step := func() {
		if err := s.Send(ctx, payload); err != nil {
			t.Fatal(err)
		}
		if _, err := a.Next(ctx); err != nil {
			t.Fatal(err)
		}
	}
	for range 100 { // warm: connections, buffers, the credit loop
		step()
	}
	allocs := testing.AllocsPerRun(500, step)
	t.Logf("allocations per record (Send + Next of 40 bytes, one record per batch): %.1f", allocs)
	// Three today: the frame of Send's []byte item (SendBytes takes the
	// arena instead), the receiver's copy of the batch (its records
	// outlive the read buffer), and the handler's Context. The half is
	// room for a rare timer or buffer growth inside the 500 runs.
	if allocs > 3.5 {
		t.Errorf("%.1f allocations per record, want at most 3", allocs)
	}
}

// A send that lands between the batcher's wake and the moment it marks
// itself awake leaves a second token; its records are in the flush the
// wake makes, so the token is dropped, not turned into a second wake.
func TestMuxBatcherOneWakePerBurst(t *testing.T) {
	producer, consumer := muxNodes(t, MuxConfig{})
	a, s := muxStream(t, producer, consumer)
	fill(t, s, 0, 1)
	readTokens(t, a, 0, 1, 5*time.Second)
	b := s.slot().B
	idle := func() bool {
		b.Mu.Lock()
		defer b.Mu.Unlock()
		return !b.Awake && len(b.Wake) == 0
	}
	testwait.Until(t, "the batcher to sleep", idle)
	// The next wake meets a send of its burst in the window between the
	// wake and the moment it marks itself awake. When that wake goes back
	// to sleep, no token may be left to wake it a second time.
	woke, left := false, -1
	b.Mu.Lock()
	b.TestOnWake = func() {
		if !woke {
			woke = true
			b.Signal(metrics.WakeFrame)
		}
	}
	b.TestOnSleep = func() {
		if woke && left < 0 {
			left = len(b.Wake)
		}
	}
	b.Mu.Unlock()
	b.Signal(metrics.WakeFrame)
	testwait.Until(t, "the batcher to sleep again", func() bool {
		b.Mu.Lock()
		defer b.Mu.Unlock()
		return left >= 0
	})
	b.Mu.Lock()
	b.TestOnWake, b.TestOnSleep = nil, nil
	n := left
	b.Mu.Unlock()
	if n != 0 {
		t.Fatalf("the batcher went to sleep with %d wake token left: a second wake for one burst", n)
	}
}

// A take on a peer visited within its DrainVisitFloor arms the sweeper's
// floor timer instead of waking the sweeper only to wait: the bell stays
// silent, and the credit still comes back when the floor ends, to a
// producer that sends nothing (so no batch of its carries it back).
func TestMuxDoorbellArmsTheFloorWithoutAWake(t *testing.T) {
	const c = 4
	cfg := MuxConfig{InitialCredit: c, DrainVisitFloor: 300 * time.Millisecond, CreditSweepInterval: time.Minute} // no walk before the floor ends
	producer, consumer := muxNodes(t, cfg)
	a, s := muxStream(t, producer, consumer)
	fill(t, s, 0, 2*c+1)
	testwait.Until(t, "C records delivered", func() bool { return queued(&a.st) == c })
	blocked := sendAsync(s, context.Background(), token(2*c+1))
	testwait.Until(t, "the next Send to wait", func() bool { _, _, w := slotState(s.slot()); return w })
	cm := muxOf(t, consumer)
	visits0 := cm.N.DrainVisits.Load()
	readTokens(t, a, 0, 1, 5*time.Second) // the take that lists the slot: the last batch came well within the floor
	cm.FloorMu.Lock()
	armed := !cm.FloorAt.IsZero()
	cm.FloorMu.Unlock()
	if !armed {
		t.Fatal("the take did not arm the floor timer")
	}
	if n := len(cm.Bell); n != 0 {
		t.Fatal("the take rang the bell although the peer's floor had not passed")
	}
	select {
	case err := <-blocked:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the credit did not come back when the floor ended")
	}
	if cm.N.DrainVisits.Load() == visits0 {
		t.Fatal("the credit came back without a doorbell visit")
	}
	readTokens(t, a, 1, 2*c+1, 5*time.Second)
}

// The consumer's node writes credit replies under FlushManual too, though
// nobody there calls FlushBatch: the reply_linger window's end lets them
// go. A stream longer than its window then finishes, and the replies went
// out in fewer batches than there were takes.
func TestMuxCreditRepliesGoAtTheLingerUnderManual(t *testing.T) {
	const c, n = 4, 64
	producer := newRemoteNode(t, WithMux(MuxConfig{InitialCredit: c}))
	consumer := newRemoteNode(t, WithMux(MuxConfig{InitialCredit: c, Flush: FlushManual, ReplyLinger: 2 * time.Millisecond}))
	if err := producer.msg.RegisterPeer(consumer.msg.PeerInfo()); err != nil {
		t.Fatal(err)
	}
	a, s := muxStream(t, producer, consumer)
	sent := fillAsync(s, 0, n)
	readTokens(t, a, 0, n, 10*time.Second)
	if err := <-sent; err != nil {
		t.Fatal(err)
	}
	cm := muxOf(t, consumer)
	if got := cm.N.CreditSent.Load(); got < n-c {
		t.Fatalf("credit sent %d for %d records past a window of %d", got, n, c)
	}
	if b := cm.N.BatchesSent.Load(); b >= n {
		t.Fatalf("%d reply batches for %d takes: the linger did not gather replies", b, n)
	}
}
