package mux

import (
	"github.com/velo-go/velo/internal/muxwire"
	"github.com/velo-go/velo/metrics"
)

// The move-aside rule (the book's "Ordering is per slot"). A stream whose
// last record went staged has its terminal and CloseSlot arrive first,
// in an eager batch, and the old slot waits for the staged record with
// the close deferred (pendingClose). The sender is done with the slot once
// it sent the close, and its free list is last in, first out, so its next
// stream on the lane may open on the same index at once. Ingress then
// moves the old slot aside, kept by its full slot id, and opens the new
// one at the index; the old slot still finds its records by id
// (slotLocked) and ends as it would have in the table. An OpenSlot over a
// slot whose close has not arrived stays a collision, and so does one
// whose id (the 8-bit generation come round) names a slot still aside.

// moveAsideLocked takes old, which its sender closed, out of its index
// and keeps it by its id. It stays live. The caller holds ip.mu.
func (ip *IngressPeer) moveAsideLocked(old *InSlot) {
	ip.Slots[old.id.Index()] = nil
	if ip.aside == nil {
		ip.aside = make(map[muxwire.SlotID]*InSlot)
	}
	ip.aside[old.id] = old
}

// collisionLocked refuses an OpenSlot over a slot still in use: counted
// as a protocol error and a slot_collision, answered with ProtocolError.
func (ip *IngressPeer) collisionLocked(rec muxwire.Record, rep *replies) {
	ip.mx.N.ProtocolErrors.Add(1)
	ip.mx.N.Dropped[metrics.DropSlotCollision].Add(1)
	rep.closes = append(rep.closes, CloseReply{rec.Slot, muxwire.ProtocolError, true})
}
