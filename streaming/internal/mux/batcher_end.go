package mux

// How a batcher ends: an epoch death, the close's goodbye, the last
// writes after its goroutine stopped, and the idle check of eviction.

import (
	"errors"
	"time"

	"github.com/velo-go/velo/internal/muxwire"
	"github.com/velo-go/velo/metrics"
	"github.com/velo-go/velo/streaming/internal/streamerr"
)

// EpochDeath ends every live slot of the batcher (a refused batch, a lost
// peer) and starts a new epoch: the owner retires the old epoch's slots
// when the first batch of the new one arrives.
func (b *Batcher) EpochDeath() {
	b.Mu.Lock()
	for _, s := range b.slots {
		if s != nil {
			s.endLocked(streamerr.ErrConsumerLost)
		}
	}
	b.Ready = b.Ready[:0]
	// The replies owed for the peer's slots (credit, closes, stops) stay:
	// those slots belong to the peer's epoch, which this one's death does
	// not end; dropping their credit would stall them for good.
	b.Epoch = b.Mx.Epochs.Add(1)
	b.seq = 0
	b.Mu.Unlock()
	b.Mx.epochDeaths()
}

// goodbye posts, before the mux stops, a CloseSlot for every stream
// between this node and the peer: PeerGone for the slots of this node's
// producers (their consumers see ErrSenderDropped at once) and
// UnknownSlot for theirs, the peer's slots this node consumes (their
// producers see the cancel). A refused post ends it: the peer's
// connection is gone, and its own peer loss path takes over.
//
// It is queued for the lane's writer, after whatever is being written, and
// the close writes it itself when the lane is free.
func (b *Batcher) goodbye(theirs []muxwire.SlotID) {
	b.Mu.Lock()
	// From here on the batcher writes only closes and the notices of
	// attaches answered too late (postLate, abandonBound), and an attach
	// answered now fails its slot instead of queuing an OpenSlot.
	b.State.To(BatcherClosing)
	// OpenSlots still queued (a pipelined attach answered just before the
	// end) go first: a close for a slot the peer never saw opened would
	// leave its bind waiting out the accept window.
	opens := make([]*OutSlot, 0, len(b.Opens))
	for _, s := range b.Opens {
		if !s.Life.Closed() {
			opens = append(opens, s)
		}
	}
	clear(b.Opens)
	b.Opens = b.Opens[:0]
	recs := make([]CloseReply, 0, b.live+len(theirs))
	for _, s := range b.slots {
		if s != nil && !s.Life.Closed() && !s.pending { // a pending slot's peer never heard of it
			recs = append(recs, CloseReply{ID: s.ID, Reason: muxwire.PeerGone})
		}
	}
	// Closes still owed go too: Manager.Close cancels its anchors just
	// before the mux stops, and the batcher's goroutine may not have
	// written them yet.
	for id, reason := range b.Closes {
		recs = append(recs, CloseReply{ID: id, Reason: reason})
	}
	clear(b.Closes)
	for _, id := range theirs {
		recs = append(recs, CloseReply{ID: id, Reason: muxwire.UnknownSlot})
	}
	w := b.QueueJobLocked(LaneJob{Kind: JobGoodbye, Opens: opens, Closes: recs}, true)
	b.Mu.Unlock()
	b.writeQueued(w)
}

// postLate writes closes after the batcher was retired, in order with
// what it wrote before. It comes from a reader: the lane's writer writes
// them, and the caller only once the goroutine is gone and the lane free.
func (b *Batcher) postLate(closes []CloseReply) {
	b.queueJob(LaneJob{Kind: JobLateCloses, Closes: closes}, false)
}

// postOpenSlots writes the OpenSlots of opens, in as many batches as the
// batch cap needs. The caller owns the lane's writes. It returns the first
// refusal.
func (b *Batcher) postOpenSlots(opens []*OutSlot) error {
	return b.postRecords(len(opens), muxwire.OpenSlotBodyLen, func(enc *muxwire.Encoder, i int) {
		s := opens[i]
		enc.OpenSlot(s.ID, s.openSeq, s.anchorID, s.Session)
	})
}

// errNoLongerWrites is postRecords' answer once the batcher may not write
// (BatcherState.mayWrite).
var errNoLongerWrites = errors.New("velo: the mux batcher was taken out and writes no more")

// postRecords writes n control records with bodies of bodyLen bytes, each
// put in by add, in as many batches of their own as the batch cap needs.
// The caller owns the lane's writes. It stops at the first refusal and
// returns it,
// or errNoLongerWrites.
func (b *Batcher) postRecords(n, bodyLen int, add func(enc *muxwire.Encoder, i int)) error {
	per := max(1, min(muxwire.MaxRecords, (b.Mx.Cfg.MaxBatchBytes-muxwire.BatchHeaderLen)/muxwire.RecordLen(bodyLen)))
	for i := 0; i < n; {
		k := min(n-i, per)
		b.Mu.Lock()
		if !b.State.MayWrite() {
			b.Mu.Unlock()
			return errNoLongerWrites
		}
		b.seq++
		epoch, seq := b.Epoch, b.seq
		b.Mu.Unlock()
		// A pooled buffer, as flush uses: a zero-RTT open posts a batch
		// of its own per stream, and a buffer made for it (and the
		// messenger's copy of it on the unowned path) were two of that
		// stream's allocations. The encoder is the writer's, not a local
		// one, which add would move to the heap.
		enc := &b.ctlEnc
		ob := b.TakeBuf()
		enc.Start(ob.bytes(muxwire.BatchHeaderLen+k*muxwire.RecordLen(bodyLen)), b.Lane, epoch, seq)
		for ; k > 0; i, k = i+1, k-1 {
			add(enc, i)
		}
		batch := enc.Batch()
		*enc = muxwire.Encoder{} // holds no buffer past its batch
		ob.set(batch)
		err := b.Mx.sendOwned(b.peer, b.Lane, batch, "", ob)
		ob.Release()
		if err != nil {
			return err
		}
	}
	return nil
}

// IdleLocked says the batcher has no live slot and has not been used for
// ttl. The caller holds b.mu.
//
// A batcher that carries only replies (its node consumes the peer's
// streams and sends none) is in use too: a reply since the last check
// counts as use then, at the cost of a flag per reply rather than a clock
// read.
func (b *Batcher) IdleLocked(now time.Time, ttl time.Duration) bool {
	if b.used {
		b.used, b.LastUse = false, now
	}
	return b.live == 0 && b.Credit.Len() == 0 && len(b.Closes) == 0 && len(b.signals) == 0 && now.Sub(b.LastUse) >= ttl
}

// Stop ends the batcher's goroutine and fails its slots.
func (b *Batcher) Stop() {
	b.Mu.Lock()
	if b.State.Stopped() {
		b.Mu.Unlock()
		return
	}
	b.State.To(StoppedState[b.State])
	b.lingerT.Stop()
	if b.windowT != nil {
		b.windowT.Stop()
	}
	b.Mu.Unlock()
	b.EpochDeath()
	b.Signal(metrics.WakeControl) // the goroutine sees it stopped and ends: not counted
	<-b.Done
	b.lastWrites() // work queued as the goroutine ended
}

// lastWrites writes, as the goroutine ends, the control work queued for
// it, unless the lane's owner is writing and will.
func (b *Batcher) lastWrites() {
	b.Mu.Lock()
	own := len(b.jobs) > 0 && b.OwnLocked()
	b.Mu.Unlock()
	if own {
		b.Release()
	}
}
