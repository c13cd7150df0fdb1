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
	if len(ip.dirty) > 1 {
		ip.dirtyMu.Unlock()
		return // listed since the last visit: the first take rang already
	}
	due := ip.lastVisit.Add(ip.mx.Cfg.DrainVisitFloor)
	ip.dirtyMu.Unlock()
	ip.mx.ringAt(ip, due)
}

// ringAt asks for a doorbell visit of ip, whose visit floor ends at
// due. A floor that has passed rings the bell, which wakes the sweeper.
// One still running arms the sweeper's floor timer instead: waking the
// sweeper only for it to wait out the floor cost a goroutine switch per
// forward pass and peer, and the next batch from the peer (the arrival
// path) usually returns the credit before the floor ends.
func (mx *Mux) ringAt(ip *IngressPeer, due time.Time) {
	if d := time.Until(due); d > 0 {
		mx.armFloor(ip, due, d)
		return
	}
	select {
	case mx.Bell <- struct{}{}:
	default:
	}
}

// armFloor makes the sweeper's floor timer fire by due (d from now), the
// end of ip's floor, unless it is set to fire earlier.
func (mx *Mux) armFloor(ip *IngressPeer, due time.Time, d time.Duration) {
	mx.FloorMu.Lock()
	mx.floors[ip] = due
	if mx.FloorAt.IsZero() || due.Before(mx.FloorAt) {
		mx.FloorAt = due
		mx.floorT.Reset(d)
	}
	mx.FloorMu.Unlock()
}

// visitedFloor takes ip's floor off the timer once a visit returned its
// credit (most often the arrival path: a batch from the peer returns the
// credit of the takes since the last one). The next take arms it again,
// for the floor after this visit. Left as it was, the timer woke the
// sweeper only for the doorbell to find the floor moved on and arm it
// again: with batches arriving more often than DrainVisitFloor (a forward
// pass per millisecond against a floor of 2 ms), a wake of the sweeper per
// floor that returned nothing. The timer moves to the earliest floor of
// the peers still waiting, or stops.
func (mx *Mux) visitedFloor(ip *IngressPeer) {
	mx.FloorMu.Lock()
	defer mx.FloorMu.Unlock()
	due, ok := mx.floors[ip]
	if !ok {
		return
	}
	delete(mx.floors, ip)
	if !due.Equal(mx.FloorAt) {
		return // the timer is set for another peer's floor
	}
	var next time.Time
	for _, d := range mx.floors {
		if next.IsZero() || d.Before(next) {
			next = d
		}
	}
	mx.FloorAt = next
	if next.IsZero() {
		mx.floorT.Stop()
		return
	}
	mx.floorT.Reset(max(time.Until(next), 0))
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
	ip.mx.visitedFloor(ip)
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
