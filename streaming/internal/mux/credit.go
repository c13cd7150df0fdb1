package mux

// Credit going back to the producer: a consumer's take marks its slot
// dirty, and the dirty slots' credit rides the next batch to that peer,
// a doorbell of the sweeper, or its periodic walk.

import (
	"time"

	"github.com/velo-go/velo/internal/muxwire"
)

// took is the anchor's pop telling the slot that the consumer took a
// record: the credit for it may go back. Only the take that lists the
// slot as dirty rings the sweeper.
func (ip *IngressPeer) markDirty(s *InSlot) {
	ip.dirtyMu.Lock()
	ip.dirty = append(ip.dirty, s)
	first := len(ip.dirty) == 1
	due := ip.lastVisit.Add(ip.mx.Cfg.DrainVisitFloor)
	ip.dirtyMu.Unlock()
	if first {
		ip.mx.ringAt(due)
	}
}

// ringAt asks for a doorbell visit of a peer whose visit floor ends at
// due. A floor that has passed rings the bell, which wakes the sweeper.
// One still running arms the sweeper's floor timer instead: waking the
// sweeper only for it to wait out the floor cost a goroutine switch per
// forward pass and peer, and the next batch from the peer (the arrival
// path) usually returns the credit before the floor ends.
func (mx *Mux) ringAt(due time.Time) {
	if d := time.Until(due); d > 0 {
		mx.armFloor(due, d)
		return
	}
	select {
	case mx.Bell <- struct{}{}:
	default:
	}
}

// armFloor makes the sweeper's floor timer fire by due (d from now), unless
// it is set to fire earlier.
func (mx *Mux) armFloor(due time.Time, d time.Duration) {
	mx.FloorMu.Lock()
	if mx.FloorAt.IsZero() || due.Before(mx.FloorAt) {
		mx.FloorAt = due
		mx.floorT.Reset(d)
	}
	mx.FloorMu.Unlock()
}

// ReconcileDirty returns the credit of every dirty slot of the peer.
func (ip *IngressPeer) ReconcileDirty() {
	ip.dirtyMu.Lock()
	ip.lastVisit = time.Now()
	if len(ip.dirty) == 0 {
		// Nothing to swap: swapping an empty list would drop its array
		// (only a list with slots comes back as the spare), and the next
		// take would make a new one, an allocation per arrival.
		ip.dirtyMu.Unlock()
		return
	}
	ds := ip.dirty
	ip.dirty, ip.spare = ip.spare, nil
	ip.dirtyMu.Unlock()
	defer ip.returnSpare(ds)
	b, err := ip.mx.replyBatcher(ip.peer, ip.lane)
	if err != nil {
		return
	}
	// Replies are queued under the table's lock (the batcher's lock nests
	// in it, as on the arrival path), all under one lock of the batcher:
	// the list of them is the table's, reused.
	ip.Mu.Lock()
	defer ip.Mu.Unlock()
	cs := ip.replies[:0]
	var sent uint64
	for _, s := range ds {
		d := s.TakeDrained() // clears the listing first: a take after it lists the slot again
		if d == 0 || ip.slotLocked(s.id) != s {
			continue
		}
		if s.Buffered() > int64(ip.mx.Cfg.SlotByteBudget) {
			// Over the slot's byte watermark: the grant waits, so that
			// large records cannot pile up to C of them. The consumer's
			// next take lists the slot again.
			s.ReturnDrained(d)
			continue
		}
		s.Held += d
		sent += uint64(d)
		cs = append(cs, SlotCredit{s.id, d})
	}
	if len(cs) > 0 {
		ip.mx.N.CreditSent.Add(sent)
		b.ReplyAll(cs)
	}
	ip.replies = cs[:0]
}

// returnSpare keeps ds as the next dirty buffer, unless another visit
// already left one.
func (ip *IngressPeer) returnSpare(ds []*InSlot) {
	clear(ds)
	ip.dirtyMu.Lock()
	if ip.spare == nil {
		ip.spare = ds[:0]
	}
	ip.dirtyMu.Unlock()
}

// consumerGone closes the slot of an anchor that its consumer cancelled
// or closed, and tells the producer (CloseSlot{UnknownSlot}), so that an
// idle producer learns of it without sending again.
func (s *InSlot) consumerGone() {
	ip := s.PeerIn
	ip.Mu.Lock()
	live := ip.slotLocked(s.id) == s
	if live {
		ip.endLocked(s, false)
	}
	ip.Mu.Unlock()
	if !live {
		return
	}
	if b, err := ip.mx.replyBatcher(ip.peer, ip.lane); err == nil {
		b.ReplyClose(s.id, muxwire.UnknownSlot)
	}
}
