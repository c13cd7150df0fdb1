package mux

import (
	"errors"
	"fmt"
	"time"

	"github.com/velo-go/velo/ext"
	"github.com/velo-go/velo/internal/muxwire"
	wire "github.com/velo-go/velo/internal/streamwire"
	"github.com/velo-go/velo/metrics"
	"github.com/velo-go/velo/streaming/internal/inlet"
	"github.com/velo-go/velo/streaming/internal/streamerr"
)

// AttachAnswerTimeout bounds the wait for the answer: a live owner
// answers at once, and a lost one fails the call sooner through the
// messenger. The credit walk enforces it (expirePending), so an attach
// arms no timer and watches no context: those cost more than the rest of
// the attach's own work.
var AttachAnswerTimeout = 30 * time.Second // a var: tests shorten it

// The mux's side of a pipelined attach (streaming's mux_pipeline.go):
// the pending slot, its answer or failure, and the writes for a stream
// that ended before its answer.

// OpenOn opens a slot with open on the lane's current batcher. When
// eviction or peer loss took that batcher out as it was picked (open
// answers ErrCancelled), it tries once more on the lane's new one. b is
// nil when the mux is closed.
func (mx *Mux) OpenOn(peer ext.WorkerID, lane int, open func(*Batcher) (*OutSlot, error)) (b *Batcher, s *OutSlot, err error) {
	if b, err = mx.BatcherFor(peer, lane); err != nil {
		return nil, nil, err
	}
	s, err = open(b)
	if errors.Is(err, streamerr.ErrCancelled) {
		if b2, err2 := mx.BatcherFor(peer, lane); err2 == nil && b2 != b {
			b = b2
			s, err = open(b)
		}
	}
	return b, s, err
}

// SetCall records the attach request of a pending slot, for expirePending.
func (b *Batcher) SetCall(s *OutSlot, call uint64) {
	b.Mu.Lock()
	if s.pending {
		s.Call = call
	}
	b.Mu.Unlock()
}

// OpenPending allocates a slot for a pipelined attach to handle: it holds
// its records until resolvePending or failPending.
func (b *Batcher) OpenPending(handle wire.AnchorHandle) (*OutSlot, error) {
	b.Mu.Lock()
	defer b.Mu.Unlock()
	if !b.State.MayWrite() {
		return nil, streamerr.ErrCancelled
	}
	idx, ok := b.allocLocked()
	if !ok {
		return nil, errSlotsExhausted
	}
	id, _ := muxwire.NewSlotID(idx, b.gens[idx])
	s := &OutSlot{B: b, ID: id, Handle: handle, anchorID: handle.LocalID(), pending: true, pipelined: true,
		Q: b.queueLocked()}
	b.slots[idx] = s
	b.live++
	b.pendingN++
	s.pendingWalk = b.Mx.walks.Load()
	b.LastUse = time.Now()
	s.openSeq = s.Seq
	s.Seq++
	return s, nil
}

// Pipelined says the slot was opened by a pipelined attach, before the
// owner's answer.
func (s *OutSlot) Pipelined() bool { return s.pipelined }

// Answered returns a channel that is closed once the owner answered the
// pipelined attach of s, or it failed; nil for a slot whose attach waited.
func (s *OutSlot) Answered() <-chan struct{} {
	if !s.pipelined {
		return nil
	}
	s.B.Mu.Lock()
	defer s.B.Mu.Unlock()
	return s.answeredLocked()
}

// answeredLocked is Answered for a pipelined slot. The caller holds B.Mu.
func (s *OutSlot) answeredLocked() <-chan struct{} {
	if s.answered {
		return inlet.ClosedChan
	}
	if s.answeredCh == nil {
		s.answeredCh = make(chan struct{})
	}
	return s.answeredCh
}

// answerLocked records the answer (or the failure) of a pending slot's
// attach and wakes its waiters. The caller holds B.Mu and has taken the
// slot off pending, so it runs once.
func (s *OutSlot) answerLocked() {
	s.answered = true
	if s.answeredCh != nil {
		close(s.answeredCh)
	}
}

// ResolvePending opens a pending slot under the owner's answer: its
// OpenSlot is queued for the next batch, ahead of the records it held.
func (b *Batcher) ResolvePending(s *OutSlot, session uint64, credit uint32) {
	b.Mu.Lock()
	if !s.pending {
		b.Mu.Unlock()
		return
	}
	s.pending = false
	b.pendingN--
	s.answerLocked()
	if s.Life.Closed() || b.State.SaidGoodbye() || !b.State.MayWrite() {
		// The stream ended before the answer came (the Sender dropped, an
		// epoch death, the Manager closing after its goodbye). The owner
		// bound its anchor for this attach: tell it the stream is over.
		// Queued for the lane's writer: this is the messenger's reader,
		// which must not wait for a flush that waits for the transport.
		s.endLocked(streamerr.ErrConsumerLost)
		s.Session = session
		w := b.QueueJobLocked(LaneJob{Kind: jobOpenGone, slot: s}, false)
		b.Mu.Unlock()
		b.writeQueued(w)
		return
	}
	s.Session, s.Credit, s.window = session, credit, credit
	b.Opens = append(b.Opens, s)
	s.readyLocked()
	b.Mu.Unlock()
	b.Signal(metrics.WakeOpen)
}

// openGone writes, for a pipelined attach whose stream ended before the
// owner's answer, its OpenSlot and CloseSlot{PeerGone} in one batch: the
// owner's consumer sees ErrSenderDropped now, instead of when its stream
// watchdog gives up on a slot that never opened. When the slot's index
// already serves a stream the owner may know (an OpenSlot for it would
// collide there), or eviction or peer loss stopped the batcher, the lane's
// current batcher writes it with an index of its own. The caller owns
// the lane's writes.
func (b *Batcher) writeOpenGone(s *OutSlot) {
	b.Mu.Lock()
	now := b.slots[s.ID.Index()]
	b.Mu.Unlock()
	wrote := (now == nil || now.pending) && b.postOpenGone(s.ID, s.openSeq, s.anchorID, s.Session)
	if !wrote {
		b.Mx.AbandonBound(b.peer, b.Lane, s.anchorID, s.Session)
	}
}

// AbandonBound tells the owner that the stream it bound for this node as
// (anchorID, session) will not open. An index taken for the moment
// carries the OpenSlot and the CloseSlot{PeerGone}; with every index
// taken, or the batcher stopped, nothing is written and the owner's
// accept window ends the bind. It is queued for the lane's writer, and
// written by the caller when the lane is free.
func (b *Batcher) AbandonBound(anchorID, session uint64) {
	b.queueJob(LaneJob{Kind: jobAbandon, anchorID: anchorID, session: session}, true)
}

// writeAbandon is abandonBound's write. The caller owns the lane's writes.
func (b *Batcher) writeAbandon(anchorID, session uint64) {
	b.Mu.Lock()
	idx, ok := b.allocLocked()
	var id muxwire.SlotID
	if ok {
		id, _ = muxwire.NewSlotID(idx, b.gens[idx])
	}
	b.Mu.Unlock()
	if !ok {
		return
	}
	b.postOpenGone(id, 0, anchorID, session)
	b.Mu.Lock()
	b.gens[idx]++
	b.free = append(b.free, idx)
	b.Mu.Unlock()
}

// AbandonBound is the batcher's abandonBound on the lane's current
// batcher, or once this mux is closed on its retired one.
func (mx *Mux) AbandonBound(peer ext.WorkerID, lane int, anchorID, session uint64) {
	b, err := mx.BatcherFor(peer, lane)
	if err != nil { // closed
		b = mx.retiredFor(peer, lane)
	}
	b.AbandonBound(anchorID, session)
}

// retiredFor returns the batcher that writes to peer on lane once this
// mux is closed: the one close retired, or for a lane that had none a new
// one, made retired here. One writer per lane keeps the late batches in
// order: two batches with epochs of their own could arrive in the wrong
// order, and the peer would drop the older as stale. A new one's
// goroutine ends at once, since the mux is stopping.
func (mx *Mux) retiredFor(peer ext.WorkerID, lane int) *Batcher {
	k := LaneKey{peer, lane}
	mx.Mu.Lock()
	defer mx.Mu.Unlock()
	b := mx.retired[k]
	if b == nil {
		b = newBatcher(mx, peer, lane)
		b.Mu.Lock() // a batcher's lock nests in the mux's
		b.State.To(BatcherRetired)
		b.State.To(BatcherClosing)
		b.Mu.Unlock()
		mx.retired[k] = b
	}
	return b
}

// postOpenGone writes OpenSlot and CloseSlot{PeerGone} for id in one
// batch: the owner claims its bind and ends it with Dropped. It reports
// false when the batcher may no longer write (a transport's refusal
// counts as written: the peer is gone). The caller owns the lane's writes.
func (b *Batcher) postOpenGone(id muxwire.SlotID, seq uint32, anchorID, session uint64) bool {
	err := b.postRecords(2, muxwire.OpenSlotBodyLen, func(enc *muxwire.Encoder, i int) {
		if i == 0 {
			enc.OpenSlot(id, seq, anchorID, session)
		} else {
			enc.CloseSlot(id, 0, muxwire.PeerGone)
		}
	})
	return !errors.Is(err, errNoLongerWrites)
}

// FailPending ends a pending slot with err: its records are discarded,
// and its sends, Finalize and Detach return err.
func (b *Batcher) FailPending(s *OutSlot, err error) {
	b.Mu.Lock()
	defer b.Mu.Unlock()
	if !s.pending {
		return
	}
	s.pending = false
	b.pendingN--
	s.answerLocked()
	if !s.Life.Closed() {
		s.failErr = err
		s.endLocked(streamerr.ErrCancelled)
	}
}

// expirePending fails the pipelined attaches that have waited longer than
// AttachAnswerTimeout, counted in credit walks (tick is this walk's). Each
// one's request is abandoned too, so that an owner that never answers does
// not keep a response slot of the messenger per attach.
func (mx *Mux) expirePending(tick uint64) {
	limit := uint64(max(1, AttachAnswerTimeout/mx.Cfg.CreditSweepInterval))
	type lateAttach struct {
		s    *OutSlot
		call uint64
	}
	var late []lateAttach // allocated only when an attach is late: the idle walk allocates nothing
	mx.Mu.Lock()
	for _, b := range mx.Batchers {
		b.Mu.Lock() // a batcher's lock nests in the mux's
		if b.pendingN > 0 {
			for _, s := range b.slots {
				if s != nil && s.pending && tick-s.pendingWalk > limit {
					late = append(late, lateAttach{s, s.Call})
				}
			}
		}
		b.Mu.Unlock()
	}
	mx.Mu.Unlock()
	for _, l := range late {
		// Abandon runs the answer's callback with the error, which fails
		// the slot; failPending covers a request that could not be named.
		if mx.AbandonCall == nil || !mx.AbandonCall(l.call, fmt.Errorf("%w within %v", streamerr.ErrAttachTimeout, AttachAnswerTimeout)) {
			l.s.B.FailPending(l.s, fmt.Errorf("%w to %v within %v", streamerr.ErrAttachTimeout, l.s.Handle, AttachAnswerTimeout))
		}
	}
}
