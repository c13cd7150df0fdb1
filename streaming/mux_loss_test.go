package streaming

import (
	"context"
	"errors"
	"fmt"
	"io"
	"sync/atomic"
	"testing"
	"time"

	"github.com/velo-go/velo/ext"
	"github.com/velo-go/velo/internal/testwait"
	"github.com/velo-go/velo/streaming/internal/mux"
)

// Tests of the mux's failure paths: epoch death, lost batches and the
// stream watchdog, the flush policies, and the idle sweep.

// postGate wraps a mux's post so a test can refuse batches (the transport
// refused them: epoch death) or lose them (admitted, then the connection
// dropped them). It must be installed before the mux's first batch.
type postGate struct {
	refuse, lose atomic.Int32 // batches still to refuse or lose
}

func (g *postGate) install(mx *mux.Mux) {
	inner := mx.Post
	mx.Post = func(peer ext.WorkerID, lane int, batch []byte) error {
		if g.refuse.Load() > 0 && g.refuse.Add(-1) >= 0 {
			return errors.New("test: batch refused")
		}
		if g.lose.Load() > 0 && g.lose.Add(-1) >= 0 {
			return nil
		}
		return inner(peer, lane, batch)
	}
	if owned := mx.PostOwned; owned != nil {
		mx.PostOwned = func(peer ext.WorkerID, lane int, batch []byte, o ext.Owner) error {
			if g.refuse.Load() > 0 && g.refuse.Add(-1) >= 0 {
				return errors.New("test: batch refused")
			}
			if g.lose.Load() > 0 && g.lose.Add(-1) >= 0 {
				return nil
			}
			return owned(peer, lane, batch, o)
		}
	}
}

// TestMuxEpochDeath: a batch the transport refuses is epoch death: every
// producer slot to that peer ends (Cancelled, sends fail), and the
// consumer ends every old-epoch slot with ErrSenderDropped when the first
// batch of the new epoch arrives, behind the tokens it had.
func TestMuxEpochDeath(t *testing.T) {
	producer, consumer := muxNodes(t, MuxConfig{})
	var gate postGate
	gate.install(muxOf(t, producer))
	const streams = 5
	anchors := make([]*Anchor[[]byte], streams)
	senders := make([]*Sender[[]byte], streams)
	for i := range streams {
		anchors[i], senders[i] = muxStream(t, producer, consumer)
		fill(t, senders[i], 0, 2)
		readTokens(t, anchors[i], 0, 2, 5*time.Second)
	}
	gate.refuse.Store(1)
	fill(t, senders[0], 2, 1) // its batch is refused
	for i, s := range senders {
		select {
		case <-s.Cancelled():
		case <-time.After(5 * time.Second):
			t.Fatalf("stream %d: epoch death did not cancel its producer", i)
		}
		if err := s.Send(context.Background(), token(9)); !errors.Is(err, ErrCancelled) {
			t.Fatalf("stream %d: send after epoch death: %v", i, err)
		}
	}
	// A new stream opens in the new epoch: the consumer retires the old.
	a, s := muxStream(t, producer, consumer)
	fill(t, s, 0, 1)
	readTokens(t, a, 0, 1, 5*time.Second)
	for i, a := range anchors {
		if _, err := nextItemWithin(t, a, 5*time.Second); !errors.Is(err, ErrSenderDropped) {
			t.Fatalf("stream %d: want ErrSenderDropped after epoch death, got %v", i, err)
		}
	}
	if muxOf(t, producer).N.EpochDeaths.Load() == 0 {
		t.Fatal("no epoch death counted")
	}
}

// TestMuxManualFlush: under FlushManual data waits for FlushBatch, a
// terminal goes on its own, and credit still comes back (the consumer's
// replies are not data), so a stream longer than its window finishes.
func TestMuxManualFlush(t *testing.T) {
	const c = 4
	producer, consumer := muxNodes(t, MuxConfig{Flush: FlushManual, InitialCredit: c})
	a, s := muxStream(t, producer, consumer)
	fill(t, s, 0, 1)
	if _, err := nextItemWithin(t, a, 50*time.Millisecond); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("under FlushManual a record went without FlushBatch: %v", err)
	}
	producer.sm.FlushBatch()
	readTokens(t, a, 0, 1, 5*time.Second)
	const n = 10 * c
	for i := 1; i < n; i++ {
		fill(t, s, i, 1)
		producer.sm.FlushBatch()
		if _, err := nextItemWithin(t, a, 2*time.Second); err != nil {
			cr, q, _ := slotState(s.slot())
			t.Fatalf("token %d: %v; producer credit %d queued %d; credit sent %d received %d", i, err, cr, q,
				muxOf(t, consumer).N.CreditSent.Load(), muxOf(t, producer).N.CreditReceived.Load())
		}
	}
	fill(t, s, n, 2)
	if err := s.Finalize(); err != nil { // no FlushBatch: the terminal is urgent
		t.Fatal(err)
	}
	for i := n; i < n+2; i++ {
		if _, err := nextItemWithin(t, a, 2*time.Second); err != nil {
			b := s.slot().B
			b.Mu.Lock()
			msg := fmt.Sprintf("credit %d q %d terminal %v inReady %v awake %v ready %d same %v flushable %d wake %d", s.slot().Credit, len(s.slot().Q), s.slot().Life.Terminal(), s.slot().InReady, b.Awake, len(b.Ready), len(b.Ready) > 0 && b.Ready[0] == s.slot(), s.slot().Flushable, len(b.Wake))
			b.Mu.Unlock()
			t.Fatalf("token %d: %v; %s", i, err, msg)
		}
	}
	if _, err := nextItemWithin(t, a, 5*time.Second); err != io.EOF {
		t.Fatalf("want io.EOF, got %v", err)
	}
}

// TestMuxIdleSweepAllocs: the sweeper's periodic walk and doorbell on a
// node whose streams have ended allocate nothing.
func TestMuxIdleSweepAllocs(t *testing.T) {
	producer, consumer := muxNodes(t, MuxConfig{})
	a, s := muxStream(t, producer, consumer)
	fill(t, s, 0, 1)
	readTokens(t, a, 0, 1, 5*time.Second)
	s.Finalize()
	if _, err := nextItemWithin(t, a, 5*time.Second); err != io.EOF {
		t.Fatal(err)
	}
	for _, mx := range []*mux.Mux{muxOf(t, producer), muxOf(t, consumer)} {
		testwait.Until(t, "no live slot", func() bool { out, in := mx.LiveSlots(); return out == 0 && in == 0 })
		allocs := testing.AllocsPerRun(100, func() {
			mx.Walk(time.Now())
			mx.Doorbell()
		})
		if allocs != 0 {
			t.Errorf("an idle sweep allocates %.1f times", allocs)
		}
	}
}

// TestMuxCreditRepostedAfterRefusedReply: the consumer's batch of credit
// replies is refused (epoch death of the consumer's batcher). That epoch
// is the consumer's own; the producer's stream lives in the producer's
// epoch and must not lose the credit: it is posted again, and the stream
// finishes.
func TestMuxCreditRepostedAfterRefusedReply(t *testing.T) {
	const c = 4
	producer, consumer := muxNodes(t, MuxConfig{InitialCredit: c})
	var gate postGate
	gate.install(muxOf(t, consumer))
	a, s := muxStream(t, producer, consumer)
	fill(t, s, 0, 2*c+1) // C delivered, C+1 withheld
	gate.refuse.Store(1) // the first credit reply is refused
	const n = 20 * c
	sent := fillAsync(s, 2*c+1, n-(2*c+1))
	for i := range n {
		if _, err := nextItemWithin(t, a, 5*time.Second); err != nil {
			cr, q, _ := slotState(s.slot())
			t.Fatalf("token %d: %v (producer credit %d, queued %d)", i, err, cr, q)
		}
	}
	if err := <-sent; err != nil {
		t.Fatal(err)
	}
	if gate.refuse.Load() > 0 {
		t.Fatal("no reply was refused")
	}
	if muxOf(t, consumer).N.CreditReposted.Load() == 0 {
		t.Fatal("credit_reposted not counted")
	}
}

// TestMuxCancelRepostedAfterRefusedBatch: the batch that carries a
// consumer's cancel (CloseSlot{UnknownSlot}) or stop (LifecycleSlot) is
// refused; the producer still hears of it.
func TestMuxCancelRepostedAfterRefusedBatch(t *testing.T) {
	for _, cancel := range []bool{true, false} {
		producer, consumer := muxNodes(t, MuxConfig{})
		var gate postGate
		gate.install(muxOf(t, consumer))
		a, s := muxStream(t, producer, consumer)
		fill(t, s, 0, 1)
		readTokens(t, a, 0, 1, 5*time.Second)
		// Let the credit reply for the token go first, so the refused
		// batch is the one with the signal.
		testwait.Until(t, "the credit reply", func() bool { return muxOf(t, producer).N.CreditReceived.Load() == 1 })
		gate.refuse.Store(1)
		heard := s.Stopped()
		if cancel {
			a.Controller().Cancel()
			heard = s.Cancelled()
		} else {
			a.Controller().RequestStop()
		}
		select {
		case <-heard:
		case <-time.After(5 * time.Second):
			t.Fatalf("cancel %v: the producer did not hear of it after a refused batch", cancel)
		}
		if gate.refuse.Load() > 0 {
			t.Fatal("no batch was refused")
		}
	}
}

// TestMuxWatchdogSparesStoppedConsumer: a consumer that stops reading
// leaves its producer without credit (heartbeats spend it too); the
// watchdog exempts a sender that holds none, so the stream survives many
// windows and goes on when the consumer reads again.
func TestMuxWatchdogSparesStoppedConsumer(t *testing.T) {
	const hb = 20 * time.Millisecond
	producer, consumer := muxNodes(t, MuxConfig{InitialCredit: 2}, WithHeartbeatInterval(hb))
	a, s := muxStream(t, producer, consumer)
	fill(t, s, 0, 1)
	cm := muxOf(t, consumer)
	// Ten windows: enough for heartbeats to spend the credit and for three
	// dead windows to pass after that, were the exemption missing.
	// Time passing is the scenario here, not a wait for an outcome.
	<-time.After(10 * hb)
	if n := cm.N.WatchdogFirings.Load(); n != 0 {
		t.Fatalf("the watchdog fired %d times on a stream whose consumer only paused", n)
	}
	readTokens(t, a, 0, 1, 5*time.Second)
	fill(t, s, 1, 1)
	s.Finalize()
	readTokens(t, a, 1, 1, 5*time.Second)
	if _, err := nextItemWithin(t, a, 5*time.Second); err != io.EOF {
		t.Fatalf("want io.EOF, got %v", err)
	}
}

// A refused batch that the batch cap had cut leaves no build behind it to
// mark the batcher asleep; the batcher must still wake for the next
// stream's sends. (Found in review: with awake left true, no send woke it.)
func TestMuxBatcherWakesAfterARefusedCutBatch(t *testing.T) {
	producer, consumer := muxNodes(t, MuxConfig{MaxBatchBytes: 80, WaitForAttach: true})
	var gate postGate
	gate.install(muxOf(t, producer))
	_, s := muxStream(t, producer, consumer)
	b := s.slot().B
	testwait.Until(t, "the lane's writes to be free", b.TryOwn) // the sends queue; the next pass cuts them into batches
	for i := range 3 {
		if err := s.Send(context.Background(), token(i)); err != nil {
			b.Release()
			t.Fatal(err)
		}
	}
	gate.refuse.Store(1)
	b.Release()
	select {
	case <-s.Cancelled():
	case <-time.After(10 * time.Second):
		t.Fatal("the refused batch caused no epoch death")
	}
	a2, s2 := muxStream(t, producer, consumer)
	if s2.slot().B != b {
		t.Fatal("the second stream went to another batcher")
	}
	fill(t, s2, 0, 1)
	readTokens(t, a2, 0, 1, 10*time.Second)
}
