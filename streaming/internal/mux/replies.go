package mux

// The control records a batcher owes its peer (credit, closes, stops and
// cancels): queued in its maps under b.mu and written by its next pass.

import (
	"github.com/velo-go/velo/internal/muxwire"
	"github.com/velo-go/velo/metrics"
)

// Grant adds credit the consumer returned and lists the slot again. The
// credit never goes above the window the slot opened with: a grant that
// would lift it there is a liar's (or a repeat), counted in
// control_refused, and cannot let this side send past the window.
func (b *Batcher) Grant(id muxwire.SlotID, delta uint32) {
	b.GrantAll([]SlotCredit{{id, delta}})
}

// SlotCredit is credit for one slot: a grant from the peer, or a reply
// owed to it.
type SlotCredit struct {
	ID    muxwire.SlotID
	Delta uint32
}

// GrantAll is Grant for the CreditUpdates of one batch, under one lock of
// the batcher and with at most one wake: a consumer returns credit for
// every stream of a forward pass at once, so a batch of replies holds a
// grant for each of them.
func (b *Batcher) GrantAll(gs []SlotCredit) {
	wake := false
	b.Mu.Lock()
	for _, g := range gs {
		s := b.slotLocked(g.ID)
		if s == nil || s.Life.Closed() {
			b.refuseLocked(g.ID)
			continue
		}
		if s.clampCreditLocked(g.Delta) {
			b.Mx.controlRefused()
		}
		if s.readyLocked() {
			wake = true
		}
	}
	b.Mu.Unlock()
	if wake {
		b.Signal(metrics.WakeControl) // credit the peer granted
	}
}

// slotLocked is the live slot with exactly id, or nil.
func (b *Batcher) slotLocked(id muxwire.SlotID) *OutSlot {
	idx := id.Index()
	if int(idx) >= len(b.slots) {
		return nil
	}
	if s := b.slots[idx]; s != nil && s.ID == id {
		return s
	}
	return nil
}

// autoFlush is true under the default policy: write at the end of every
// wake. Under Manual, data waits for FlushBatch.
func (b *Batcher) autoFlush() bool { return b.Mx.Cfg.Flush == FlushAuto }

// Kick is FlushBatch for this batcher: what is staged is written now,
// whatever the policy (releasePass, then flushNow).
func (b *Batcher) Kick() {
	b.releasePass()
	b.flushNow()
}

// releasePass is the first half of FlushBatch: under FlushManual it releases
// exactly what each slot holds now; records staged after the call wait for
// the next one, so one call is one pass. It looks at every slot of the
// batcher, once per call.
func (b *Batcher) releasePass() {
	b.Mu.Lock()
	defer b.Mu.Unlock()
	if b.autoFlush() {
		return
	}
	for _, s := range b.slots {
		if s != nil && !s.Life.Closed() && len(s.Q) > 0 {
			s.Flushable = len(s.Q)
			s.readyLocked()
		}
	}
}

// flushNow is the second half: the caller writes what was released when
// the lane is free (inline.go), else the batcher's next wake does.
func (b *Batcher) flushNow() {
	b.Mu.Lock()
	inline := b.inlineLocked()
	b.Mu.Unlock()
	if inline {
		b.flushOwned(true)
		b.lingerStaged() // as after a wake's pass
		return
	}
	b.Signal(metrics.WakeFrame) // FlushBatch releases queued records
}

// Reply queues a CreditUpdate for a slot the peer owns on this node's
// ingress. Replies coalesce per slot; a batch of only replies waits up to
// reply_linger for company.
func (b *Batcher) Reply(id muxwire.SlotID, delta uint32) {
	b.ReplyAll([]SlotCredit{{id, delta}})
}

// ReplyAll is Reply for the credit of many slots, under one lock of the
// batcher: a credit return visits every dirty slot of a peer, one per
// stream of the last forward pass.
func (b *Batcher) ReplyAll(cs []SlotCredit) {
	b.Mu.Lock()
	if b.handedOnLocked() {
		b.handOn(func(nb *Batcher) { nb.ReplyAll(cs) })
		return
	}
	b.used = true
	closes := len(b.Closes) > 0 // most often none: no lookup per slot
	for _, c := range cs {
		if !closes || !b.closingLocked(c.ID) {
			b.Credit.Add(c.ID, c.Delta)
		}
	}
	if !b.lingerOn && !b.Awake {
		b.startLingerLocked()
	}
	b.Mu.Unlock()
}

// closingLocked says whether a close is owed for id: it supersedes credit.
func (b *Batcher) closingLocked(id muxwire.SlotID) bool {
	_, ok := b.Closes[id]
	return ok
}

// startLingerLocked opens a reply_linger window. The batcher's goroutine
// waits on the window's timer itself, so its end is one wake, not a timer
// goroutine that then wakes the batcher. The end marks the window over,
// not only wakes the batcher: under FlushManual nothing else would let the
// replies go, and the peer's producers would wait for credit for good.
func (b *Batcher) startLingerLocked() {
	b.lingerOn = true
	b.lingerT.Reset(b.Mx.Cfg.ReplyLinger)
}

// MaxRejects caps the answers owed for OpenSlots that ingress never
// admitted: a burst of bogus OpenSlots must not grow the batcher without
// bound. Dropping one costs no credit, which is why a cap is safe here and
// nowhere else.
const MaxRejects = 8192

// rejectOpen queues the answer to an OpenSlot this side never admitted, on
// the capped reject lane.
func (b *Batcher) rejectOpen(id muxwire.SlotID, reason muxwire.CloseReason) {
	b.Mu.Lock()
	if b.handedOnLocked() {
		b.handOn(func(nb *Batcher) { nb.rejectOpen(id, reason) })
		return
	}
	if _, known := b.rejected[id]; !known {
		if len(b.rejected) >= MaxRejects {
			b.Mu.Unlock()
			b.Mx.controlRefused()
			return
		}
		b.rejected[id] = struct{}{}
	}
	b.Closes[id] = reason
	b.Mu.Unlock()
	b.Signal(metrics.WakeControl)
}

// ReplyClose queues a CloseSlot for a slot the peer owns; it supersedes
// the slot's credit and is urgent.
func (b *Batcher) ReplyClose(id muxwire.SlotID, reason muxwire.CloseReason) {
	b.Mu.Lock()
	if b.handedOnLocked() {
		b.handOn(func(nb *Batcher) { nb.ReplyClose(id, reason) })
		return
	}
	b.Credit.Delete(id)
	b.Closes[id] = reason
	b.Mu.Unlock()
	b.Signal(metrics.WakeControl)
}

// lifecycleSignal is a stop or cancel a consumer sends its producer.
type lifecycleSignal struct {
	session uint64
	action  muxwire.LifecycleAction
}

// replyLifecycle queues a stop or cancel for a slot the peer owns; a
// cancel wins over a stop of the same session. It is urgent.
func (b *Batcher) replyLifecycle(id muxwire.SlotID, session uint64, action muxwire.LifecycleAction) {
	b.Mu.Lock()
	if b.handedOnLocked() {
		b.handOn(func(nb *Batcher) { nb.replyLifecycle(id, session, action) })
		return
	}
	if old, ok := b.signals[id]; !ok || old.session != session || action == muxwire.Cancel {
		b.signals[id] = lifecycleSignal{session, action}
	}
	b.Mu.Unlock()
	b.Signal(metrics.WakeControl)
}
