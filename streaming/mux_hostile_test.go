package streaming

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"math"
	"sync/atomic"
	"testing"
	"time"

	"github.com/velo-go/velo/ext"
	"github.com/velo-go/velo/internal/muxwire"
	wire "github.com/velo-go/velo/internal/streamwire"
	"github.com/velo-go/velo/internal/testwait"
	"github.com/velo-go/velo/metrics"
	"github.com/velo-go/velo/streaming/internal/mux"
)

// Tests of what the mux refuses from a peer that does not keep the
// protocol (mux_hostile.go). The hostile batches are handed to the
// receiving mux as the messenger would hand them, under the sender
// identity the messenger binds to the connection: a real peer that lies,
// or a worker the node has no route to.

// openedStream is a mux stream whose slot is open on the consumer and
// whose first token went through and had its credit returned: the
// consumer's view of the producer's credit is the whole window again.
func openedStream(t *testing.T, producer, consumer *remoteNode) (*Anchor[[]byte], *Sender[[]byte]) {
	t.Helper()
	a, s := muxStream(t, producer, consumer)
	pmx := muxOf(t, producer)
	before := pmx.N.CreditReceived.Load()
	fill(t, s, 0, 1)
	readTokens(t, a, 0, 1, 5*time.Second)
	testwait.Until(t, "the token's credit", func() bool { return pmx.N.CreditReceived.Load() > before })
	return a, s
}

// batcherEpoch is the epoch of mx's lane-0 batcher towards peer: a batch
// forged with it passes as one from mx's node.
func batcherEpoch(t *testing.T, mx *mux.Mux, peer ext.WorkerID) uint64 {
	t.Helper()
	b := mx.ExistingBatcher(peer, 0)
	if b == nil {
		t.Fatal("no batcher to the peer")
	}
	b.Mu.Lock()
	defer b.Mu.Unlock()
	return b.Epoch
}

// forge hands mx one batch of lane 0 from sender, built by add.
func forge(t *testing.T, mx *mux.Mux, sender ext.WorkerID, epoch uint64, add func(enc *muxwire.Encoder)) {
	t.Helper()
	var enc muxwire.Encoder
	enc.Start(nil, 0, epoch, 1<<30)
	add(&enc)
	if err := mx.HandleBatch(sender, 0, enc.Batch()); err != nil {
		t.Fatal(err)
	}
}

// slowBeats makes the heartbeat window long, so that no heartbeat record
// spends credit while a test counts it.
var slowBeats = WithHeartbeatInterval(time.Minute)

// A producer that sends more Data records than its consumer granted: the
// record past the window is neither buffered nor delivered, the consumer
// reads what was granted and then ErrSenderDropped, and the producer hears
// CloseSlot{ProtocolError}. (Before, the record was counted as a protocol
// error and delivered: 22.8 MiB buffered for a window of 32.)
func TestMuxDataBeyondCreditEndsTheSlot(t *testing.T) {
	const c = 4
	producer, consumer := muxNodes(t, MuxConfig{InitialCredit: c}, slowBeats)
	a, s := openedStream(t, producer, consumer)
	id, epoch, next := slotSeq(s)
	cmx := muxOf(t, consumer)
	forge(t, cmx, producer.msg.WorkerID(), epoch, func(enc *muxwire.Encoder) {
		for i := range c + 1 {
			enc.Data(id, next+uint32(i), wire.AppendBytesItem(nil, token(100+i)))
		}
	})
	if n := cmx.N.Dropped[metrics.DropOverCredit].Load(); n != 1 {
		t.Fatalf("over_credit drops %d, want 1", n)
	}
	readTokens(t, a, 100, c, 5*time.Second)
	if _, err := nextItemWithin(t, a, 5*time.Second); !errors.Is(err, ErrSenderDropped) {
		t.Fatalf("after the window: %v, want ErrSenderDropped", err)
	}
	select {
	case <-s.Cancelled():
	case <-time.After(5 * time.Second):
		t.Fatal("the producer never heard the ProtocolError close")
	}
}

// Records that arrive ahead of their turn wait in the hold only within
// the producer's credit: a record past it ends the slot. (Before, the hold
// took C+1 data records whatever the credit.)
func TestMuxHoldBoundedByCredit(t *testing.T) {
	const c = 4
	producer, consumer := muxNodes(t, MuxConfig{InitialCredit: c}, slowBeats)
	a, s := openedStream(t, producer, consumer)
	id, epoch, next := slotSeq(s)
	cmx := muxOf(t, consumer)
	forge(t, cmx, producer.msg.WorkerID(), epoch, func(enc *muxwire.Encoder) {
		// next never comes: every record waits behind its gap.
		for i := 1; i <= c+1; i++ {
			enc.Data(id, next+uint32(i), wire.AppendBytesItem(nil, token(i)))
		}
	})
	if n := cmx.N.HoldOverflow.Load(); n != 1 {
		t.Fatalf("hold overflows %d, want 1", n)
	}
	if n := cmx.HeldRecords(); n != 0 {
		t.Fatalf("%d records still held after the slot ended", n)
	}
	if _, err := nextItemWithin(t, a, 5*time.Second); !errors.Is(err, ErrSenderDropped) {
		t.Fatalf("got %v, want ErrSenderDropped", err)
	}
}

// The holds of a peer's slots share its byte budget: past it a slot's
// second held record ends the slot, while its first always fits (a large
// staged record fetched after a later one). A repeated frame_seq is held
// once.
func TestMuxHoldBoundedByPeerBytes(t *testing.T) {
	const budget = 64 << 10
	producer, consumer := muxNodes(t, MuxConfig{PeerByteBudget: budget}, slowBeats)
	a, s := openedStream(t, producer, consumer)
	id, epoch, next := slotSeq(s)
	cmx := muxOf(t, consumer)
	big := wire.AppendBytesItem(nil, bytes.Repeat([]byte("x"), budget)) // over the budget alone
	forge(t, cmx, producer.msg.WorkerID(), epoch, func(enc *muxwire.Encoder) {
		enc.Data(id, next+1, big)
		enc.Data(id, next+1, big) // a repeat: held once
	})
	if n, o := cmx.HeldRecords(), cmx.N.HoldOverflow.Load(); n != 1 || o != 0 {
		t.Fatalf("held %d, overflows %d; want the first record held, once", n, o)
	}
	forge(t, cmx, producer.msg.WorkerID(), epoch, func(enc *muxwire.Encoder) {
		enc.Data(id, next+2, wire.AppendBytesItem(nil, []byte("small")))
	})
	if n := cmx.N.HoldOverflow.Load(); n != 1 {
		t.Fatalf("hold overflows %d, want 1", n)
	}
	if _, err := nextItemWithin(t, a, 5*time.Second); !errors.Is(err, ErrSenderDropped) {
		t.Fatalf("got %v, want ErrSenderDropped", err)
	}
	cmx.BudgetMu.Lock()
	pb := cmx.Budgets[producer.msg.WorkerID()]
	cmx.BudgetMu.Unlock()
	if n := pb.Hold.Load(); n != 0 {
		t.Fatalf("the peer's held bytes are %d after its slot ended", n)
	}
}

// A CreditUpdate that would lift a slot's credit above the window it
// opened with, one huge or many repeated, is counted and clamped: the
// producer cannot send past the window, and the stream goes on.
func TestMuxForgedCreditCannotRaiseTheWindow(t *testing.T) {
	const c = 4
	producer, consumer := muxNodes(t, MuxConfig{InitialCredit: c}, slowBeats)
	a, s := openedStream(t, producer, consumer)
	id, _, _ := slotSeq(s)
	pmx, cmx := muxOf(t, producer), muxOf(t, consumer)
	// The consumer's own epoch towards the producer: the forged batches
	// pass as the consumer's.
	epoch := batcherEpoch(t, cmx, producer.msg.WorkerID())
	refused := pmx.N.ControlRefused.Load()
	forge(t, pmx, consumer.msg.WorkerID(), epoch, func(enc *muxwire.Encoder) {
		enc.CreditUpdate(id, 0, math.MaxUint32)
	})
	forge(t, pmx, consumer.msg.WorkerID(), epoch, func(enc *muxwire.Encoder) {
		for range 100 {
			enc.CreditUpdate(id, 0, 1)
		}
	})
	if cr, _, _ := slotState(s.slot()); cr != c {
		t.Fatalf("credit %d after forged grants, want the window %d", cr, c)
	}
	if n := pmx.N.ControlRefused.Load() - refused; n != 101 {
		t.Fatalf("control_refused counted %d forged grants, want 101", n)
	}
	// Past the window the records wait on the producer: the consumer's
	// inlet never holds more than C.
	sent := fillAsync(s, 1, 2*c)
	testwait.Until(t, "the window to be spent", func() bool {
		cr, q, _ := slotState(s.slot())
		return cr == 0 && q == c
	})
	if n := queued(&a.st); n > c {
		t.Fatalf("the consumer holds %d records, over the window of %d", n, c)
	}
	readTokens(t, a, 1, 2*c, 5*time.Second)
	if err := <-sent; err != nil {
		t.Fatal(err)
	}
	if n := cmx.N.ProtocolErrors.Load(); n != 0 {
		t.Fatalf("%d protocol errors on the consumer", n)
	}
}

// A batch from a worker the node has no route to (a stranger's made-up
// OpenSlot) makes no ingress table and no batcher: it is counted and
// dropped. (Before, the batcher made for it could never post, and retried
// in a loop: one such OpenSlot pinned a core, 2,000 forged worker ids took
// both.)
func TestMuxStrangerWithoutRouteCostsNothing(t *testing.T) {
	_, consumer := muxNodes(t, MuxConfig{})
	cmx := muxOf(t, consumer)
	const strangers = 2000
	wakes := cmx.N.BatcherWakes.Load()
	for i := range strangers {
		forge(t, cmx, ext.WorkerID(0x5eed0000+i), 1, func(enc *muxwire.Encoder) {
			enc.OpenSlot(muxwire.SlotID(1<<8), 0, 42, 43)
		})
	}
	cmx.Mu.Lock()
	tables, batchers := len(cmx.Ingress), len(cmx.Batchers)
	cmx.Mu.Unlock()
	cmx.BudgetMu.Lock()
	budgets := len(cmx.Budgets)
	cmx.BudgetMu.Unlock()
	if tables+batchers+budgets != 0 {
		t.Fatalf("made for strangers: %d tables, %d batchers, %d budgets", tables, batchers, budgets)
	}
	if n := cmx.N.Dropped[metrics.DropUnroutable].Load(); n != strangers {
		t.Fatalf("unroutable drops %d, want %d", n, strangers)
	}
	if n := cmx.N.BatcherWakes.Load() - wakes; n != 0 {
		t.Fatalf("%d batcher wakes for a stranger", n)
	}
}

// refusePostsTo makes every post of mx to peer fail with err.
func refusePostsTo(mx *mux.Mux, peer ext.WorkerID, err error) {
	inner, owned := mx.Post, mx.PostOwned
	mx.Post = func(p ext.WorkerID, lane int, batch []byte) error {
		if p == peer {
			return err
		}
		return inner(p, lane, batch)
	}
	if owned != nil {
		mx.PostOwned = func(p ext.WorkerID, lane int, batch []byte, o ext.Owner) error {
			if p == peer {
				return err
			}
			return owned(p, lane, batch, o)
		}
	}
}

// A made-up OpenSlot from a worker the node has a route to but that never
// attached: the reject goes to it once, and the batcher made for it is
// idle and goes at its TTL. Counted in wakes, not time.
func TestMuxRejectToRoutableStranger(t *testing.T) {
	cfg := MuxConfig{BatcherIdleTTL: 20 * time.Millisecond, CreditSweepInterval: 5 * time.Millisecond}
	consumer, other := newRemoteNode(t, WithMux(cfg)), newRemoteNode(t, WithMux(cfg))
	if err := consumer.msg.RegisterPeer(other.msg.PeerInfo()); err != nil {
		t.Fatal(err)
	}
	cmx, omx := muxOf(t, consumer), muxOf(t, other)
	stranger := other.msg.WorkerID()
	wakes := cmx.N.BatcherWakes.Load()
	forge(t, cmx, stranger, 1, func(enc *muxwire.Encoder) {
		enc.OpenSlot(muxwire.SlotID(1<<8), 0, 42, 43)
	})
	testwait.Until(t, "the reject to reach the stranger", func() bool {
		return omx.N.BatchesRecv.Load()+omx.N.Dropped[metrics.DropUnroutable].Load() == 1
	})
	testwait.Until(t, "the idle batcher to be evicted", func() bool { return cmx.ExistingBatcher(stranger, 0) == nil })
	if n := cmx.N.BatcherWakes.Load() - wakes; n > 2 {
		t.Fatalf("%d batcher wakes for one reject, want at most 2", n)
	}
}

// A made-up OpenSlot from a worker the node has a route to, whose posts
// are all refused (a peer that never attached, at an address that takes
// nothing). The reject is retried a few times, further apart each time,
// then dropped and counted; the batcher is then idle and goes at its TTL.
// Counted in wakes, not time: before, each refusal woke the batcher again
// at once, it never stopped owing the reject, and it was never evicted.
func TestMuxRefusedRejectIsNotRetriedForever(t *testing.T) {
	cfg := MuxConfig{BatcherIdleTTL: 20 * time.Millisecond, CreditSweepInterval: 5 * time.Millisecond}
	consumer, other := newRemoteNode(t, WithMux(cfg)), newRemoteNode(t, WithMux(cfg)) // other never attaches
	if err := consumer.msg.RegisterPeer(other.msg.PeerInfo()); err != nil {
		t.Fatal(err)
	}
	cmx := muxOf(t, consumer)
	stranger := other.msg.WorkerID()
	refusePostsTo(cmx, stranger, errors.New("test: the lane refuses"))
	wakes := cmx.N.BatcherWakes.Load()
	forge(t, cmx, stranger, 1, func(enc *muxwire.Encoder) {
		enc.OpenSlot(muxwire.SlotID(1<<8), 0, 42, 43)
	})
	testwait.Until(t, "the reject to be dropped", func() bool { return cmx.N.RepliesDiscarded.Load() == 1 })
	testwait.Until(t, "the idle batcher to be evicted", func() bool { return cmx.ExistingBatcher(stranger, 0) == nil })
	if n := cmx.N.BatcherWakes.Load() - wakes; n > mux.MaxRefusedPosts+1 {
		t.Fatalf("%d batcher wakes for one refused reject, want at most %d", n, mux.MaxRefusedPosts+1)
	}
}

// A post refused because the messenger has no route to the peer drops the
// batcher at once, with what it owed.
func TestMuxUnroutablePostDropsTheBatcher(t *testing.T) {
	_, consumer := muxNodes(t, MuxConfig{})
	cmx := muxOf(t, consumer)
	const stranger = ext.WorkerID(0x5eed)
	cmx.Routable = func(ext.WorkerID) bool { return true } // the route goes as the reject is posted
	refusePostsTo(cmx, stranger, fmt.Errorf("%w: gone", ext.ErrPeerNotRegistered))
	wakes := cmx.N.BatcherWakes.Load()
	forge(t, cmx, stranger, 1, func(enc *muxwire.Encoder) {
		enc.OpenSlot(muxwire.SlotID(1<<8), 0, 42, 43)
	})
	testwait.Until(t, "the batcher to be dropped", func() bool { return cmx.ExistingBatcher(stranger, 0) == nil })
	if n := cmx.N.RepliesDiscarded.Load(); n != 1 {
		t.Fatalf("replies discarded %d, want 1", n)
	}
	if n := cmx.N.BatcherWakes.Load() - wakes; n > 2 {
		t.Fatalf("%d batcher wakes, want at most 2", n)
	}
}

// The ids a peer presents back as authority are random: two muxes start
// their epochs at unrelated points far from zero, routing sessions are not
// a counter, and _mux_slot tags guessed from small counters end nothing.
func TestMuxIdsAreNotGuessable(t *testing.T) {
	producer, consumer := muxNodes(t, MuxConfig{})
	p, c := muxOf(t, producer).Epochs.Load(), muxOf(t, consumer).Epochs.Load()
	if p == c || p < 1<<32 || c < 1<<32 || p >= 1<<mux.EpochBaseBits || c >= 1<<mux.EpochBaseBits {
		t.Fatalf("epoch bases %d and %d: want two random values in [2^32, 2^%d)", p, c, mux.EpochBaseBits)
	}
	a1, s1 := openedStream(t, producer, consumer)
	_, s2 := openedStream(t, producer, consumer)
	x, y := s1.slot().Session, s2.slot().Session
	if x == y || x < 1<<32 || y < 1<<32 || y-x < 1<<16 && x-y < 1<<16 {
		t.Fatalf("routing sessions %d and %d look like a counter", x, y)
	}
	id, _, _ := slotSeq(s1)
	cmx := muxOf(t, consumer)
	cause := errors.New("test: refused")
	for epoch := uint64(0); epoch < 8; epoch++ {
		for session := uint64(0); session < 256; session++ {
			cmx.StagedFailure(producer.msg.WorkerID(), 0, fmt.Sprintf("%d:%d:%d", epoch, uint32(id), session), cause)
		}
	}
	fill(t, s1, 1, 2)
	readTokens(t, a1, 1, 2, 5*time.Second)
}

// One empty batch that moves a peer's epoch to 2^64-1 is refused and
// counted: the peer's slots live on and its later batches are not stale.
// (Before, it ended every stream of the peer and locked it out.) A peer
// can still end its own streams by moving its epoch within maxEpochStep,
// and only its own: tables are kept per sender.
func TestMuxEpochJumpRefused(t *testing.T) {
	producer, consumer := muxNodes(t, MuxConfig{}, slowBeats)
	a, s := openedStream(t, producer, consumer)
	cmx := muxOf(t, consumer)
	forge(t, cmx, producer.msg.WorkerID(), math.MaxUint64, func(*muxwire.Encoder) {})
	if n := cmx.N.Dropped[metrics.DropEpochJump].Load(); n != 1 {
		t.Fatalf("epoch_jump drops %d, want 1", n)
	}
	fill(t, s, 1, 3)
	readTokens(t, a, 1, 3, 5*time.Second)
	a2, s2 := openedStream(t, producer, consumer)
	fill(t, s2, 1, 1)
	readTokens(t, a2, 1, 1, 5*time.Second)
}

// An OpenSlot may not name an index past the 65,536 of a table: the table
// grows to the highest index opened, so one claim could make it 128 MiB.
// The bind stays for the real OpenSlot.
func TestMuxOpenSlotIndexBounded(t *testing.T) {
	producer, consumer := muxNodes(t, MuxConfig{}, slowBeats)
	openedStream(t, producer, consumer) // the consumer knows the producer
	a, err := CreateAnchor[[]byte](consumer.sm)
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	tk, err := consumer.sm.PrebindAnchor(a.Handle())
	if err != nil {
		t.Fatal(err)
	}
	cmx := muxOf(t, consumer)
	far, _ := muxwire.NewSlotID(1<<20, 0)
	epoch := func() uint64 {
		cmx.Mu.Lock()
		defer cmx.Mu.Unlock()
		ip := cmx.Ingress[mux.LaneKey{Peer: producer.msg.WorkerID(), Lane: 0}]
		ip.Mu.Lock()
		defer ip.Mu.Unlock()
		return ip.Epoch
	}()
	forge(t, cmx, producer.msg.WorkerID(), epoch, func(enc *muxwire.Encoder) {
		enc.OpenSlot(far, 0, a.Handle().LocalID(), tk.RoutingSessionID)
	})
	cmx.Mu.Lock()
	ip := cmx.Ingress[mux.LaneKey{Peer: producer.msg.WorkerID(), Lane: 0}]
	cmx.Mu.Unlock()
	ip.Mu.Lock()
	n := len(ip.Slots)
	ip.Mu.Unlock()
	if n > mux.MaxIngressSlots {
		t.Fatalf("the table grew to %d entries", n)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	s, err := OpenAnchorStream[[]byte](ctx, producer.sm, a.Handle(), tk)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	fill(t, s, 0, 2)
	readTokens(t, a, 0, 2, 5*time.Second)
}

// The answers to a stranger's made-up OpenSlots count against the reject
// lane's cap until they are posted: while a batch of them is in flight,
// and when a refused batch owes them again. A flood while the peer takes
// nothing keeps the batcher at the cap. (Before, the answers in a batch
// being posted left the lane at once, and a refused batch owed them again
// as plain closes, so the lane took as many again.)
func TestMuxRejectLaneCappedWhileInFlight(t *testing.T) {
	var attempts atomic.Int32
	release := make(chan struct{})
	mx := mux.New(MuxConfig{}.internal(), defaultHeartbeatInterval, func(ext.WorkerID, int, []byte) error {
		if attempts.Add(1) == 1 {
			<-release // the first batch of answers stays in flight
		}
		return errors.New("test: the lane refuses")
	})
	defer mx.Close()
	const peer = ext.WorkerID(9)
	flood := func(first int) {
		var enc muxwire.Encoder
		enc.Start(nil, 0, 1, uint32(first+1))
		for j := first; j < first+mux.MaxRejects; j++ {
			id, _ := muxwire.NewSlotID(uint32(j), 0)
			enc.OpenSlot(id, 0, uint64(j)+1, 1)
		}
		if err := mx.HandleBatch(peer, 0, enc.Batch()); err != nil {
			t.Fatal(err)
		}
	}
	b := func() *mux.Batcher {
		flood(0)
		return mx.ExistingBatcher(peer, 0)
	}()
	owed := func() int {
		b.Mu.Lock()
		defer b.Mu.Unlock()
		return len(b.Closes) + len(b.FlyingCloses)
	}
	testwait.Until(t, "a batch of answers in flight", func() bool { return attempts.Load() > 0 })
	flood(mux.MaxRejects)
	if n := owed(); n > mux.MaxRejects {
		close(release)
		t.Fatalf("%d answers owed with a batch in flight, over the cap of %d", n, mux.MaxRejects)
	}
	close(release)
	testwait.Until(t, "the refused batch to be owed again", func() bool {
		b.Mu.Lock()
		defer b.Mu.Unlock()
		return b.Refusals > 0
	})
	if n := owed(); n > mux.MaxRejects {
		t.Fatalf("%d answers owed after a refusal, over the cap of %d", n, mux.MaxRejects)
	}
}

// A lane that refuses the consumer's posts for longer than maxRefusedPosts
// retries and then takes batches again: the credit owed for the live slot
// is still owed, so the producer goes on. (Dropping it after the refusals,
// as the reject lane is, stalled the honest stream for good.)
func TestMuxCreditOutlivesARefusingLane(t *testing.T) {
	const c = 4
	producer, consumer := muxNodes(t, MuxConfig{InitialCredit: c}, slowBeats)
	cmx := muxOf(t, consumer)
	var refused atomic.Int64
	var refusing atomic.Bool
	refuse := func(p ext.WorkerID) bool {
		if !refusing.Load() || p != producer.msg.WorkerID() {
			return false
		}
		if refused.Add(1) >= mux.MaxRefusedPosts+2 {
			refusing.Store(false)
		}
		return true
	}
	errRefused := errors.New("test: the lane is being dialled again")
	// Installed before any traffic: the batchers read these fields.
	inner, owned := cmx.Post, cmx.PostOwned
	cmx.Post = func(p ext.WorkerID, lane int, batch []byte) error {
		if refuse(p) {
			return errRefused
		}
		return inner(p, lane, batch)
	}
	if owned != nil {
		cmx.PostOwned = func(p ext.WorkerID, lane int, batch []byte, o ext.Owner) error {
			if refuse(p) {
				return errRefused
			}
			return owned(p, lane, batch, o)
		}
	}
	a, s := openedStream(t, producer, consumer)
	refusing.Store(true)
	const n = 4 * c
	sent := make(chan struct{})
	go func() {
		defer close(sent)
		fill(t, s, 1, n)
	}()
	readTokens(t, a, 1, n, 10*time.Second)
	<-sent
	if refused.Load() < mux.MaxRefusedPosts+2 {
		t.Fatalf("%d posts refused: the lane never refused long enough", refused.Load())
	}
}
