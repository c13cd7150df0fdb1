package streaming

import (
	"io"
	"testing"
	"time"

	"github.com/velo-go/velo/ext"
	"github.com/velo-go/velo/internal/muxwire"
	"github.com/velo-go/velo/internal/testwait"
	"github.com/velo-go/velo/metrics"
	"github.com/velo-go/velo/streaming/internal/mux"
)

// TestMuxStoppedBatcherWritesNoNotice: a batcher that eviction or peer
// loss stopped writes no late notice. Its stop moved it to an epoch newer
// than its successor's on the same lane, and the owner, seeing that epoch,
// would retire the successor's streams.
func TestMuxStoppedBatcherWritesNoNotice(t *testing.T) {
	producer, consumer := muxNodes(t, MuxConfig{})
	learnOwner(t, producer, consumer)
	old := takenOut(t, muxOf(t, producer), consumer.msg.WorkerID(), false)
	a, s := muxStream(t, producer, consumer)
	if s.slot().B == old {
		t.Fatal("the stream went to the evicted batcher")
	}
	fill(t, s, 0, 2)
	readTokens(t, a, 0, 2, 5*time.Second)
	old.Stop()
	old.AbandonBound(1, 1) // a notice for a bind it cannot write any more
	successorLives(t, a, s)
}

// TestMuxSupersededBatcherWritesNothing: a batcher that eviction or peer
// loss took out of the mux writes nothing more, even before its stop. A
// refused batch may have moved it to an epoch newer than its successor's,
// and a batch of it in that epoch would make the owner retire the
// successor's streams. What it still owes goes through the successor
// (handBack).
func TestMuxSupersededBatcherWritesNothing(t *testing.T) {
	producer, consumer := muxNodes(t, MuxConfig{})
	learnOwner(t, producer, consumer)
	old := takenOut(t, muxOf(t, producer), consumer.msg.WorkerID(), false) // not yet stopped
	defer old.Stop()
	a, s := muxStream(t, producer, consumer)
	fill(t, s, 0, 2)
	readTokens(t, a, 0, 2, 5*time.Second)
	old.EpochDeath() // as a refused batch does: past the successor's epoch
	slept := false
	id, _ := muxwire.NewSlotID(7, 0)
	old.Mu.Lock()
	old.TestOnSleep = func() { slept = true }
	old.Closes[id] = muxwire.UnknownSlot // owed from before it was taken out
	old.Mu.Unlock()
	old.Signal(metrics.WakeFrame)
	testwait.Until(t, "the old batcher's pass", func() bool {
		old.Mu.Lock()
		defer old.Mu.Unlock()
		return slept
	})
	successorLives(t, a, s)
}

// TestMuxReplyToAnEvictedBatcherGoesToItsSuccessor: a reply that reaches a
// batcher after eviction took it out of the mux (the arrival path looked
// it up just before) goes to the lane's current batcher. Left on the
// evicted one, after its handBack, a grant would be lost and the peer's
// producer would wait for it for good. After peer loss it is dropped.
func TestMuxReplyToAnEvictedBatcherGoesToItsSuccessor(t *testing.T) {
	for _, lost := range []bool{false, true} {
		producer, consumer := muxNodes(t, MuxConfig{ReplyLinger: time.Hour}) // replies stay queued
		// The consumer has a route to the producer, as it has once the
		// producer's attach came: without one, the successor's post of the
		// close is refused and the successor is dropped as unreachable,
		// which raced with the check below.
		if err := consumer.msg.RegisterPeer(producer.msg.PeerInfo()); err != nil {
			t.Fatal(err)
		}
		mx := muxOf(t, consumer)
		peer := producer.msg.WorkerID()
		old := takenOut(t, mx, peer, lost)
		old.Stop()
		if !lost {
			mx.HandBack(old) // as evictIdle does after the stop
		}
		id, _ := muxwire.NewSlotID(3, 0)
		creditsBefore := mx.N.SentByType[metrics.MuxCreditUpdate].Load()
		old.Reply(id, 5)
		old.ReplyClose(id+256, muxwire.UnknownSlot)
		old.Mu.Lock()
		left := old.Credit.Len() + len(old.Closes)
		old.Mu.Unlock()
		if left != 0 {
			t.Fatalf("%d replies left on the batcher taken out (lost %v)", left, lost)
		}
		nb := mx.ExistingBatcher(peer, 0)
		if lost {
			if nb != nil {
				t.Fatal("a reply after peer loss made a batcher for the lost peer")
			}
			continue
		}
		if nb == nil || nb == old {
			t.Fatal("the reply to the evicted batcher went nowhere")
		}
		// Owed, in the batch being posted, or posted already: the close
		// is urgent, so the successor may have written both.
		nb.Mu.Lock()
		credit := nb.Credit.Get(id) + nb.FlyingCreditLocked(id)
		_, closeOwed := nb.Closes[id+256]
		_, flying := nb.FlyingCloses[id+256]
		nb.Mu.Unlock()
		if credit == 0 && mx.N.SentByType[metrics.MuxCreditUpdate].Load() > creditsBefore {
			credit = 5 // it went out in the successor's batch
		}
		closeSent := mx.N.SentByType[metrics.MuxCloseSlot].Load() > 0
		if credit != 5 || !(closeOwed || flying || closeSent) {
			t.Fatalf("the successor holds credit %d and close %v, want 5 and true", credit, closeOwed || flying || closeSent)
		}
	}
}

// TestMuxReplyingBatcherIsNotIdle: a batcher that only carries replies
// (its node consumes the peer's streams and sends none) is in use while
// it replies, and is not evicted once per BatcherIdleTTL while busy.
func TestMuxReplyingBatcherIsNotIdle(t *testing.T) {
	producer, consumer := muxNodes(t, MuxConfig{ReplyLinger: time.Hour})
	b, err := muxOf(t, consumer).BatcherFor(producer.msg.WorkerID(), 0)
	if err != nil {
		t.Fatal(err)
	}
	id, _ := muxwire.NewSlotID(3, 0)
	b.Reply(id, 1)
	b.Mu.Lock()
	b.Credit.Clear() // written since, say
	b.LastUse = time.Now().Add(-time.Hour)
	b.Mu.Unlock()
	now := time.Now()
	b.Mu.Lock()
	first, later := b.IdleLocked(now, time.Minute), b.IdleLocked(now.Add(2*time.Minute), time.Minute)
	b.Mu.Unlock()
	if first {
		t.Fatal("a batcher that replied since the last check counts as idle")
	}
	if !later {
		t.Fatal("a batcher with no reply for longer than the TTL is not idle")
	}
}

// takenOut takes the lane-0 batcher of mx to peer out of the mux, as
// eviction (lost false) or peer loss (lost true) does before it stops it.
func takenOut(t *testing.T, mx *mux.Mux, peer ext.WorkerID, lost bool) *mux.Batcher {
	t.Helper()
	b, err := mx.BatcherFor(peer, 0)
	if err != nil {
		t.Fatal(err)
	}
	mx.Mu.Lock()
	delete(mx.Batchers, mux.LaneKey{Peer: peer, Lane: 0})
	b.Supersede(lost)
	mx.Mu.Unlock()
	return b
}

// successorLives checks that a stream on a lane's current batcher, which
// has carried 2 tokens, still carries 4 more and its end.
func successorLives(t *testing.T, a *Anchor[[]byte], s *Sender[[]byte]) {
	t.Helper()
	fill(t, s, 2, 4)
	readTokens(t, a, 2, 4, 5*time.Second)
	if err := s.Finalize(); err != nil {
		t.Fatalf("Finalize: %v", err)
	}
	if _, err := nextItemWithin(t, a, 5*time.Second); err != io.EOF {
		t.Fatalf("the successor's stream ended with %v, want io.EOF", err)
	}
}
