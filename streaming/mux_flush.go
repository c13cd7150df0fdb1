package streaming

// The batcher's pass: take the ready slots' records up to their credit,
// build one _stream_batch, post it as the lane's writer, and settle what
// the post's outcome means for credit and refusals.

import (
	"fmt"

	"github.com/velo-go/velo/internal/muxwire"
)

// run is the batcher's goroutine: one wake, one pass over what is ready,
// one write per batch (cut at max_batch_bytes).
func (b *batcher) run() {
	defer close(b.done)
	for {
		select {
		case <-b.wake:
		case <-b.lingerT.C:
			b.mu.Lock()
			b.lingered = b.lingerOn
			b.mu.Unlock()
		case <-b.mx.stop:
			b.epochDeath()
			b.lastWrites()
			return
		}
		b.mu.Lock()
		if b.state.stopped() {
			b.mu.Unlock()
			b.lastWrites()
			return
		}
		if b.testOnWake != nil {
			b.testOnWake()
		}
		b.awake = true
		// A send between the wake and this point, while awake was still
		// false, left a second token; its records are queued, so the flush
		// below writes them. Dropped, it costs no second wake per burst.
		select {
		case <-b.wake:
		default:
		}
		b.mu.Unlock()
		b.mx.n.batcherWakes.Add(1)
		b.flush()
		b.lingerStaged()
	}
}

// lingerStaged opens a FlushLinger window for records staged while
// the batcher was awake on a pass that wrote no data: their Send saw it
// awake and opened none, and only a write of data opens the next one.
// Without it they would wait for a later Send. It takes the lock.
func (b *batcher) lingerStaged() {
	if b.mx.cfg.Flush != FlushLinger {
		return
	}
	b.mu.Lock()
	if !b.awake && b.staged > 0 && !b.windowArmed && !b.windowDue && !b.state.stopped() {
		b.armWindowLocked(b.mx.cfg.MaxLinger)
	}
	b.mu.Unlock()
}

// flush writes everything the policy lets go now, as the owner of the
// lane's writes. When someone else owns them, it leaves the batcher awake
// (a Send needs no wake) and the owner wakes it again as it lets go.
func (b *batcher) flush() {
	b.mu.Lock()
	if !b.ownLocked() {
		b.rerun = true
		b.mu.Unlock()
		return
	}
	b.mu.Unlock()
	defer b.release()
	for {
		ob := b.takeBuf()
		batch, _, retired, opened, more := b.build(ob)
		if batch == nil {
			ob.Release()
			break
		}
		ob.set(batch)
		err := b.mx.sendOwned(b.peer, b.lane, batch, b.takeSingletonTag(), ob)
		ob.Release()
		b.settleCredit(err)
		if len(opened) > 0 {
			b.mu.Lock()
			b.openedLocked(opened, err)
			b.mu.Unlock()
		}
		if err != nil {
			for _, s := range retired {
				s.retire(RetireDiscarded)
			}
			b.postRefused(err)
			// No build ran after the refused one, so nothing marked the
			// batcher asleep: with awake left true, no later send would
			// wake it. What the refused batch left (the rest of a cut
			// batch, re-posted replies) goes when the retry delay armed
			// here ends, not on a wake of its own: a lane that goes on
			// refusing must not be retried in a loop.
			b.mu.Lock()
			b.awake = false
			b.retryLaterLocked()
			b.mu.Unlock()
			return
		}
		for _, s := range retired {
			s.retire(RetireSent)
		}
		if !more {
			break
		}
	}
}

// settleCredit forgets the replies of a posted batch, or owes them again
// when the batch was refused (err): the consumer already counted the
// credit as the producer's, a lost cancel or stop would never reach the
// producer, and the peer's slots they are about live in the peer's epoch,
// not in the one this refusal ends. The re-post rides a later batch
// (retryLaterLocked). A peer with no route is owed nothing more: its
// replies are dropped and counted. A lane that refused maxRefusedPosts
// batches in a row loses only its rejects (answers to OpenSlots this side
// never admitted, which cost no credit); credit, closes and signals for
// live slots stay owed, retried at most once per maxRefusedBackoff, since
// dropping credit would stall an honest producer for good once the lane
// takes batches again.
func (b *batcher) settleCredit(err error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	switch {
	case err == nil:
		b.refusals = 0
		b.postedRejectsLocked()
	case unreachable(err):
		b.owePostedLocked()
		b.discardOwedLocked()
	default:
		b.refusals++
		b.owePostedLocked()
		if b.refusals >= maxRefusedPosts {
			b.discardRejectsLocked()
		}
	}
	clear(b.flying)
	clear(b.flyingCloses)
	clear(b.flyingSignals)
}

// postedRejectsLocked takes the rejects of a posted batch off the reject
// lane. Until then they count against its cap, also while they are owed
// again after a refusal: a stranger's made-up OpenSlots cannot grow the
// batcher past the cap while its posts are refused.
func (b *batcher) postedRejectsLocked() {
	if len(b.rejected) == 0 {
		return
	}
	for id := range b.flyingCloses {
		if _, owed := b.closes[id]; !owed {
			delete(b.rejected, id)
		}
	}
}

// retryLaterLocked arms the retry of what a refused batch left owed: one
// wake after retryDelayLocked, on the reply linger's timer, and none while
// nothing is owed.
func (b *batcher) retryLaterLocked() {
	owed := len(b.credit) + len(b.closes) + len(b.signals) + len(b.opens)
	if owed == 0 || b.state.stopped() {
		return
	}
	if b.lingerOn {
		b.lingerT.Stop()
	}
	b.lingerOn, b.lingered = true, false
	b.lingerT.Reset(b.retryDelayLocked())
}

func (b *batcher) owePostedLocked() {
	for id, d := range b.flying {
		if _, closing := b.closes[id]; !closing {
			b.credit[id] += d
			b.mx.n.creditReposted.Add(uint64(d))
		}
	}
	for id, reason := range b.flyingCloses {
		if _, ok := b.closes[id]; !ok {
			b.closes[id] = reason
			delete(b.credit, id)
		}
	}
	for id, sg := range b.flyingSignals {
		if _, ok := b.signals[id]; !ok {
			b.signals[id] = sg
		}
	}
}

// retire settles s's retirement under the batcher's lock.
func (s *outSlot) retire(out RetireOutcome) {
	s.b.mu.Lock()
	if s.Known() == 0 {
		s.SettleLocked(out)
	}
	s.b.mu.Unlock()
}

// build takes what may go now into one batch. It returns nil when there is
// nothing; more says that a clamp cut the batch and more is ready.
//
// Queued OpenSlots go first in the batch, ahead of any data: a slot's
// records must not overtake its open, and an open that shares the batch
// of its stream's first records saves a write. opened lists them; the
// caller records the post's result on each.
func (b *batcher) build(ob *batchBuf) (batch []byte, records int, retired, opened []*outSlot, more bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if !b.state.buildsData() {
		// Goodbye closed every slot: nothing may follow it. Or a successor
		// may write on the lane already: what is owed goes through it
		// (handBack), and this batcher's epoch must not reach the peer.
		b.awake = false
		b.sleptLocked()
		return nil, 0, nil, nil, false
	}
	data := b.autoFlush() || b.lingerReadyLocked()
	lingerDone := !b.lingerOn || b.lingered
	if !data && len(b.opens) == 0 && len(b.closes) == 0 && len(b.signals) == 0 && !(len(b.credit) > 0 && lingerDone) && !b.hasUrgentLocked() {
		b.awake = false
		b.sleptLocked()
		return nil, 0, nil, nil, false
	}
	var enc muxwire.Encoder
	// A pooled buffer comes back once the transport copied or wrote the
	// batch; without a pool each batch needs its own, sized from the last
	// one so that it is made once, not grown.
	enc.Start(ob.bytes(b.sizeHint()), b.lane, b.epoch, b.seq+1)
	limit := b.mx.cfg.MaxBatchBytes
	full := func(n int) bool {
		return enc.Len()+muxwire.RecordLen(n) > limit && enc.Count() > 0 || enc.Count() == muxwire.MaxRecords
	}
	opened = b.takeOpensLocked(&enc, full)
	for id, reason := range b.closes {
		if full(muxwire.CloseSlotBodyLen) {
			break
		}
		enc.CloseSlot(id, 0, reason)
		delete(b.closes, id)
		b.flyingCloses[id] = reason // a reject stays on the reject lane until it is posted
	}
	for id, sg := range b.signals {
		if full(muxwire.LifecycleSlotBodyLen) {
			break
		}
		enc.LifecycleSlot(id, 0, sg.session, sg.action)
		delete(b.signals, id)
		b.flyingSignals[id] = sg
	}
	for id, d := range b.credit {
		if full(muxwire.CreditUpdateBodyLen) {
			break
		}
		enc.CreditUpdate(id, 0, d)
		delete(b.credit, id)
		b.flying[id] += d
	}
	if b.lingerOn {
		b.lingerT.Stop()
		b.lingerOn, b.lingered = false, false
	}
	keep := b.ready[:0]
	cut := len(b.opens) > 0 // an open left for the next batch: its slot's data must not go first
	beforeData := enc.Count()
	for i, s := range b.ready {
		if cut {
			keep = append(keep, b.ready[i:]...)
			break
		}
		if !data && !s.life.terminal() && !s.owedLocked() {
			keep = append(keep, s)
			continue
		}
		limit := -1 // everything credit allows
		if !data && !s.life.terminal() {
			limit = s.flushable // what the last FlushBatch released
		}
		var done bool
		done, cut = b.drainSlotLocked(s, &enc, full, limit)
		if done {
			retired = append(retired, s)
		}
		if cut && len(s.q) > 0 && !s.life.closed() {
			keep = append(keep, s)
			continue
		}
		s.inReady = false
		if !s.life.closed() && s.readyAgainLocked() {
			keep = append(keep, s)
		}
	}
	clear(b.ready[len(keep):])
	b.ready = keep
	if enc.Count() > beforeData {
		b.dataWrittenLocked()
	}
	more = cut || len(b.opens) > 0 || len(b.closes) > 0 || len(b.credit) > 0 || len(b.signals) > 0
	if !more {
		if len(b.ready) == 0 || !data {
			b.awake = false
		}
	}
	if enc.Count() == 0 {
		b.awake = more
		b.sleptLocked()
		return nil, 0, retired, nil, false
	}
	b.sleptLocked() // the last batch of the pass
	b.seq++
	b.lastLen = enc.Len()
	return enc.Batch(), enc.Count(), retired, opened, more || len(b.ready) > 0 && data
}

// takeOpensLocked writes the queued OpenSlots that fit into enc and
// returns them. An open whose slot an epoch death ended meanwhile is
// dropped: its peer never hears of it.
func (b *batcher) takeOpensLocked(enc *muxwire.Encoder, full func(int) bool) []*outSlot {
	if len(b.opens) == 0 {
		return nil
	}
	var opened []*outSlot
	n := 0
	for _, s := range b.opens {
		if s.life.closed() {
			s.openErr, s.openDone = ErrCancelled, true
			b.openPostedLocked()
			n++
			continue
		}
		if full(muxwire.OpenSlotBodyLen) {
			break
		}
		enc.OpenSlot(s.id, s.openSeq, s.anchorID, s.session)
		opened = append(opened, s)
		n++
	}
	rest := copy(b.opens, b.opens[n:])
	clear(b.opens[rest:])
	b.opens = b.opens[:rest]
	return opened
}

// sleptLocked runs the test seam as a pass marks the batcher asleep.
func (b *batcher) sleptLocked() {
	if !b.awake && b.testOnSleep != nil {
		b.testOnSleep()
	}
}

// handedOnLocked reports whether a reply for the peer must go to the
// lane's current batcher instead of b: eviction or peer loss took b out of
// the mux. handBack passes on what b held before; what comes after goes
// straight to the successor. When it reports true it has unlocked b.mu.
func (b *batcher) handedOnLocked() bool {
	if !b.state.handsOn() {
		return false
	}
	b.mu.Unlock()
	return true
}

// handOn gives a reply to the lane's current batcher. After peer loss the
// reply is dropped: the peer's slots here ended with it.
func (b *batcher) handOn(f func(nb *batcher)) {
	b.mu.Lock()
	lost := b.state.dropsReplies()
	b.mu.Unlock()
	if lost {
		return
	}
	if nb, err := b.mx.batcherFor(b.peer, b.lane); err == nil && nb != b {
		f(nb)
	}
}

func (b *batcher) hasUrgentLocked() bool {
	for _, s := range b.ready {
		if s.life.terminal() || s.owedLocked() {
			return true
		}
	}
	return false
}

// readyAgainLocked re-lists a slot that still has sendable records.
func (s *outSlot) readyAgainLocked() bool {
	if len(s.q) == 0 || (s.credit == 0 && !s.headIsTerminal()) {
		return false
	}
	s.inReady = true
	return true
}

// drainSlotLocked writes s's records into enc while it has credit and the
// batch has room. A terminal is written with its CloseSlot and ends the
// slot; done says so. cut says the batch is full.
func (b *batcher) drainSlotLocked(s *outSlot, enc *muxwire.Encoder, full func(int) bool, limit int) (done, cut bool) {
	n, drained := 0, 0
	for n < len(s.q) && n != limit {
		rec := s.q[n]
		last := s.life.terminal() && n == len(s.q)-1
		if !last && s.credit == 0 {
			break
		}
		need := len(rec)
		if last {
			need += muxwire.RecordHeaderLen + muxwire.CloseSlotBodyLen
		}
		if full(need) {
			cut = true
			break
		}
		if enc.Count() == 0 && len(rec) > b.mx.cfg.MaxBatchBytes {
			// Alone in its batch and larger than a batch: the messenger
			// will stage it. The tag names the stream, so that a receiver
			// that refuses it for its size ends this stream and no other.
			b.singletonTag = fmt.Sprintf("%d:%d:%d", b.epoch, uint32(s.id), s.session)
		}
		enc.Data(s.id, s.seq, rec)
		s.seq++
		s.qBytes -= len(rec)
		b.qBytes -= len(rec)
		drained += len(rec)
		n++
		if last {
			enc.CloseSlot(s.id, s.seq, muxwire.TerminalSent)
			s.seq++
			s.life.close()
			b.releaseLocked(s)
			done = true
			n = len(s.q) // the terminal was the last record
			break
		}
		s.credit--
	}
	s.flushable = max(0, s.flushable-n)
	if drained > 0 {
		b.budgetAddLocked(-drained) // once per slot and batch, not per record
	}
	if n > 0 {
		// Shift the rest down rather than reslice, so the queue keeps its
		// array (at most about C+1 records) and a steady stream queues
		// without allocating.
		rest := copy(s.q, s.q[n:])
		clear(s.q[rest:])
		s.q = s.q[:rest]
		if rest == 0 {
			b.staged--
			s.arena = s.arena[:0] // every record in it went into the batch
		}
		s.wakeSpaceLocked()
		b.peerRoomLocked()
	}
	if done {
		b.recycleLocked(s) // every record went into the batch
	}
	if !done && s.credit == 0 && len(s.q) > 0 && !s.headIsTerminal() {
		b.mx.creditExhausted()
	}
	return done, cut
}
