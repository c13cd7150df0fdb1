package mux

import (
	"github.com/velo-go/velo/internal/muxwire"
	wire "github.com/velo-go/velo/internal/streamwire"
	"github.com/velo-go/velo/metrics"
)

// A batcher drains each slot's queue in one piece, so a busy stream's
// records sit side by side in a batch. The ingress hands such a run to
// the anchor at once: one lock of the anchor and at most one consumer
// wake per run, not per record. Under load a run is a slot's share of a
// batch (tens of records); the consumer, woken once, then finds them all.

// dataRun is the run being gathered: in-order Data records of one slot,
// none of them a terminal. It lives in the IngressPeer and is only used
// under its mu.
type dataRun struct {
	s      *InSlot
	bodies [][]byte
	bytes  int
	// used is how much of bodies' array the batch's runs have filled:
	// releaseLocked clears that much once per batch. Cleared run by run,
	// a batch of one token per stream paid a clear of pointers (a bulk
	// write barrier's set-up) per record.
	used int
}

// runLocked adds rec to the current run when it continues it, or starts a
// new run with it (handing the old one on first). It is false for a
// record that must take the general path; the caller then flushes the run
// before applying it, so that order within a slot holds.
func (ip *IngressPeer) runLocked(rec muxwire.Record, rep *replies) bool {
	if rec.Type != muxwire.Data {
		return false
	}
	r := &ip.run
	if r.s == nil || r.s.id != rec.Slot {
		s := ip.slotLocked(rec.Slot)
		if s == nil || !runnable(s, rec.Seq, rec.Body, 0) {
			return false
		}
		ip.flushRunLocked(rep)
		r.s = s
	} else if !runnable(r.s, rec.Seq, rec.Body, len(r.bodies)) {
		return false
	}
	r.bodies = append(r.bodies, rec.Body)
	r.bytes += len(rec.Body)
	return true
}

// runnable says whether body, with frame_seq seq, can join a run of s that
// already holds n records: it is next in turn, the producer had credit for
// it, it ends nothing, and nothing waits in the slot's hold.
func runnable(s *InSlot, seq uint32, body []byte, n int) bool {
	return seq == s.nextSeq+uint32(n) && s.Held > uint32(n) &&
		len(s.hold) == 0 && s.pendingClose == nil && !wire.IsTerminalFrame(body)
}

// flushRunLocked hands the run to its anchor, as inOrderLocked would one
// record at a time.
func (ip *IngressPeer) flushRunLocked(rep *replies) {
	r := &ip.run
	s, n := r.s, len(r.bodies)
	if s == nil {
		return
	}
	s.nextSeq += uint32(n)
	s.Held -= uint32(n)
	s.delivered = true
	s.AddBuffered(r.bytes)
	if !s.deliverRun(r.bodies) {
		// The consumer is gone: tell the producer, once. Record by record,
		// all but the first would have found the slot closed.
		ip.endLocked(s, false)
		rep.closes = append(rep.closes, CloseReply{ID: s.id, Reason: muxwire.UnknownSlot})
		ip.mx.N.Dropped[metrics.DropClosedSlot].Add(uint64(n - 1))
	}
	r.used = max(r.used, n)
	r.s, r.bodies, r.bytes = nil, r.bodies[:0], 0
}

// releaseLocked lets go of the batch's bodies once its runs are handed
// on: the batch's memory is the anchors' now, not the table's.
func (r *dataRun) releaseLocked() {
	clear(r.bodies[:r.used])
	r.used = 0
}

// deliverRun puts records into the inlet past its limit (credit bounds
// them) under one lock, waking the consumer once. It is false when the
// consumer is gone.
//
// The wake is sent after the lock is released. Waking a parked goroutine
// may start another thread (a futex call of several microseconds); the
// consumer it wakes takes this same lock first thing, and found it held,
// so it parked again and needed a second wake.
func (s *InSlot) deliverRun(bodies [][]byte) bool {
	var wake chan struct{}
	var ok bool
	wake, ok = s.st.DeliverRun(bodies, s.mpsc)
	if !ok {
		return false
	}
	if wake != nil {
		select {
		case wake <- struct{}{}:
		default:
		}
	}
	return true
}
