package inlet

// The mux slot that feeds an anchor (or one producer of an MPSC anchor),
// as the inlet keeps it: the slot becomes the feed at its OpenSlot and
// stops being it when it ends, and records from it go past the inlet's
// limit into room that credit reserved. Every read and write of st.feed
// and of a Remote's feed, and every push from the mux, is here, under mu.

import (
	"sync/atomic"

	"github.com/velo-go/velo/ext"
)

// Slot is a mux slot that feeds an inlet, as the inlet sees it.
type Slot interface {
	// Peer is the producer's worker: it alone may end the stream by a
	// control message (TakeBindFrom).
	Peer() ext.WorkerID
	// MarkDirty lists the slot for a credit return: the consumer took a
	// record and the slot was not listed yet. It is called once per
	// return, not per record, under the inlet's lock (the consumer's
	// take): what it locks must be leaves.
	MarkDirty()
	// RequestStop sends the producer a graceful stop.
	RequestStop()
	// ConsumerGone closes the slot of an anchor whose consumer cancelled
	// or closed, and tells the producer.
	ConsumerGone()
}

// Feed is the consumer's side of a mux slot's credit: what the consumer
// took since the last return, and the bytes delivered and not yet taken.
// The slot embeds it; the inlet holds a *Feed, not the Slot, so that the
// take on the consumer's pop is a few atomics and no interface call.
type Feed struct {
	slot     Slot
	drained  atomic.Uint32 // records the consumer took since the last reconcile
	buffered atomic.Int64  // bytes delivered to the anchor and not yet taken
	dirty    atomic.Bool   // listed for a credit return (Slot.MarkDirty)
}

// Init makes f the feed of slot, before f is attached.
func (f *Feed) Init(slot Slot) { f.slot = slot }

// took counts a record of n bytes that the consumer took, and lists the
// slot for a credit return unless it is listed already. It runs under the
// inlet's lock; MarkDirty takes only the slot table's dirty list lock.
func (f *Feed) took(n int) {
	f.buffered.Add(-int64(n))
	f.drained.Add(1)
	// A plain load first: the slot is usually listed already (one take
	// lists it, the rest of a run find it listed), and a failed CAS still
	// costs a locked instruction on a line the reconciling reader writes.
	if !f.dirty.Load() && f.dirty.CompareAndSwap(false, true) {
		f.slot.MarkDirty()
	}
}

// AddBuffered counts n bytes delivered to the inlet, before the delivery.
func (f *Feed) AddBuffered(n int) { f.buffered.Add(int64(n)) }

// Buffered is the bytes delivered and not yet taken.
func (f *Feed) Buffered() int64 { return f.buffered.Load() }

// TakeDrained takes the count of records taken since the last call, for a
// credit return. It clears the listing first: a take after it lists the
// slot again.
func (f *Feed) TakeDrained() uint32 {
	f.dirty.Store(false)
	return f.drained.Swap(0)
}

// ReturnDrained puts back a count from TakeDrained whose credit was not
// returned; the consumer's next take lists the slot again.
func (f *Feed) ReturnDrained(d uint32) { f.drained.Add(d) }

// acceptsLocked says whether records may still enter the inlet: not after
// the consumer cancelled or closed, nor after the stream ended.
func (st *State) acceptsLocked() bool {
	return !st.cancelled && !st.closed && st.endErr == nil
}

// AttachFeed makes f the feed of the anchor, or of its MPSC producer p
// (nil for an SPSC anchor). A slot delivers at most credit records and a
// terminal. prebind is the pre-bind the slot's OpenSlot claims when it
// came with a ticket (nil otherwise). It is false when the consumer
// cancelled or closed first. stop says that a stop came before the slot
// opened: the slot sends it on.
func (st *State) AttachFeed(f *Feed, p *Remote, credit uint32, prebind Prebind) (stop, ok bool) {
	st.mu.Lock()
	defer st.mu.Unlock()
	if st.cancelled || st.closed {
		return st.stopReq, false
	}
	if p != nil {
		p.feed = f
	} else {
		st.feed = f
		// Size the inlet once instead of growing it record by record.
		st.q.reserve(int(credit) + 2)
	}
	if prebind != nil && st.prebindLocked() == prebind { // the ticket's producer claims the pre-bind
		st.setPrebindLocked(nil)
		st.attached = true
	}
	return st.stopReq, true
}

// DetachFeed ends f's feeding of the anchor, or of its MPSC producer p,
// if it still feeds.
func (st *State) DetachFeed(f *Feed, p *Remote) {
	st.mu.Lock()
	if p != nil {
		if p.feed == f {
			p.feed = nil
		}
	} else if st.feed == f {
		st.feed = nil
	}
	st.mu.Unlock()
}

// Deliver puts a record from the mux into the inlet, past its limit (the
// producer's credit bounds it), tagged with p's SenderID for an MPSC
// producer p (nil for an SPSC anchor). It is false when the consumer is
// gone.
func (st *State) Deliver(frame []byte, p *Remote) bool {
	st.mu.Lock()
	defer st.mu.Unlock()
	if !st.acceptsLocked() {
		return false
	}
	st.q.push(frame)
	if p != nil {
		st.mpsc.ids.push(p.id)
	}
	st.wakeData()
	return true
}

// DeliverRun puts a run of records into the inlet under one lock, each
// tagged as Deliver tags it. It returns the channel to wake a waiting
// consumer on once the caller is past the lock (nil: none waits), and
// false when the consumer is gone.
func (st *State) DeliverRun(bodies [][]byte, p *Remote) (chan struct{}, bool) {
	st.mu.Lock()
	defer st.mu.Unlock()
	if !st.acceptsLocked() {
		return nil, false
	}
	st.q.reserve(st.q.n + len(bodies))
	for _, b := range bodies {
		st.q.push(b)
		if p != nil {
			st.mpsc.ids.push(p.id)
		}
	}
	return st.wakeChanLocked(), true
}
