package mux

// The batcher's pass: take the ready slots' records up to their credit,
// build one _stream_batch, post it as the lane's writer, and settle what
// the post's outcome means for credit and refusals.

import (
	"fmt"

	"github.com/velo-go/velo/internal/muxwire"
	"github.com/velo-go/velo/streaming/internal/retire"
	"github.com/velo-go/velo/streaming/internal/streamerr"
)

// run is the batcher's goroutine: one wake, one pass over what is ready,
// one write per batch (cut at max_batch_bytes).
func (b *Batcher) run() {
	defer close(b.Done)
	for {
		timer := false
		select {
		case <-b.Wake:
		case <-b.lingerT.C:
			timer = true
			b.Mu.Lock()
			b.lingered = b.lingerOn
			b.Mu.Unlock()
		case <-b.Mx.stop:
			b.EpochDeath()
			b.lastWrites()
			return
		}
		b.Mu.Lock()
		if b.State.Stopped() {
			b.Mu.Unlock()
			b.lastWrites()
			return
		}
		if b.TestOnWake != nil {
			b.TestOnWake()
		}
		b.Awake = true
		// A send between the wake and this point, while awake was still
		// false, left a second token; its records are queued, so the flush
		// below writes them. Dropped, it costs no second wake per burst.
		select {
		case <-b.Wake:
		default:
		}
		b.Mu.Unlock()
		b.countWake(timer)
		b.flush()
		b.lingerStaged()
	}
}

// lingerStaged opens a FlushLinger window for records staged while
// the batcher was awake on a pass that wrote no data: their Send saw it
// awake and opened none, and only a write of data opens the next one.
// Without it they would wait for a later Send. It takes the lock.
func (b *Batcher) lingerStaged() {
	if b.Mx.Cfg.Flush != FlushLinger {
		return
	}
	b.Mu.Lock()
	if !b.Awake && b.staged > 0 && !b.WindowArmed && !b.windowDue && !b.State.Stopped() {
		b.armWindowLocked(b.Mx.Cfg.MaxLinger)
	}
	b.Mu.Unlock()
}

// flush writes everything the policy lets go now, as the owner of the
// lane's writes. When someone else owns them, it leaves the batcher awake
// (a Send needs no wake) and the owner wakes it again as it lets go.
func (b *Batcher) flush() {
	b.Mu.Lock()
	if !b.OwnLocked() {
		b.rerun, b.rerunSrc = true, b.lastWake
		b.Mu.Unlock()
		return
	}
	b.Mu.Unlock()
	b.flushOwned(false)
}

// flushOwned is flush for a caller that owns the lane's writes: it builds
// and posts batches until nothing is left, and lets the writes go. With
// inline (FlushBatch on the caller's goroutine, inline.go) it posts
// without waiting for admission; a batch that would wait hands the rest
// of the flush, and the writes, to a goroutine of its own.
func (b *Batcher) flushOwned(inline bool) {
	for {
		ob := b.TakeBuf()
		batch, _, retired, opened, more := b.Build(ob)
		if batch == nil {
			ob.Release()
			break
		}
		ob.set(batch)
		tag := b.takeSingletonTag()
		var err error
		if inline {
			adm, perr, posted := b.postNoWait(batch, tag, ob)
			if !posted || adm != nil {
				go b.finishInline(batch, tag, ob, adm, retired, opened, more)
				return
			}
			err = perr
		} else {
			err = b.Mx.sendOwned(b.peer, b.Lane, batch, tag, ob)
		}
		ob.Release()
		if !b.settlePost(err, retired, opened) || !more {
			break
		}
	}
	if inline {
		b.releaseInline()
		return
	}
	b.Release()
}

// settlePost settles a posted batch (err: refused): the credit and
// closes it carried, the opens it wrote, the slots it retired. It reports
// whether the flush may go on.
func (b *Batcher) settlePost(err error, retired, opened []*OutSlot) bool {
	b.settleCredit(err)
	if len(opened) > 0 {
		b.Mu.Lock()
		b.openedLocked(opened, err)
		b.Mu.Unlock()
	}
	keepList(&b.openedBuf, opened)
	if err != nil {
		for _, s := range retired {
			s.retire(retire.Discarded)
		}
		keepList(&b.retiredBuf, retired)
		b.postRefused(err)
		// No build ran after the refused one, so nothing marked the
		// batcher asleep: with awake left true, no later send would
		// wake it. What the refused batch left (the rest of a cut
		// batch, re-posted replies) goes when the retry delay armed
		// here ends, not on a wake of its own: a lane that goes on
		// refusing must not be retried in a loop.
		b.Mu.Lock()
		b.Awake = false
		b.retryLaterLocked()
		b.Mu.Unlock()
		return false
	}
	for _, s := range retired {
		s.retire(retire.Sent)
	}
	keepList(&b.retiredBuf, retired)
	return true
}

// keepList keeps the array of a batch's list of retired or opened slots
// in *buf for the next Build, which only the owner of the writes calls
// (flush): a stream's first and last batches so list it without
// allocating. The slots are cleared out of it, so it pins none of them.
func keepList(buf *[]*OutSlot, l []*OutSlot) {
	if cap(l) == 0 {
		return
	}
	clear(l)
	if cap(l) <= maxSpareOpens {
		*buf = l[:0]
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
func (b *Batcher) settleCredit(err error) {
	b.Mu.Lock()
	defer b.Mu.Unlock()
	switch {
	case err == nil:
		b.Refusals = 0
		b.postedRejectsLocked()
	case unreachable(err):
		b.owePostedLocked()
		b.discardOwedLocked()
	default:
		b.Refusals++
		b.owePostedLocked()
		if b.Refusals >= MaxRefusedPosts {
			b.discardRejectsLocked()
		}
	}
	b.Flying = b.Flying[:0]
	clear(b.FlyingCloses)
	clear(b.flyingSignals)
}

// postedRejectsLocked takes the rejects of a posted batch off the reject
// lane. Until then they count against its cap, also while they are owed
// again after a refusal: a stranger's made-up OpenSlots cannot grow the
// batcher past the cap while its posts are refused.
func (b *Batcher) postedRejectsLocked() {
	if len(b.rejected) == 0 {
		return
	}
	for id := range b.FlyingCloses {
		if _, owed := b.Closes[id]; !owed {
			delete(b.rejected, id)
		}
	}
}

// retryLaterLocked arms the retry of what a refused batch left owed: one
// wake after retryDelayLocked, on the reply linger's timer, and none while
// nothing is owed.
func (b *Batcher) retryLaterLocked() {
	owed := b.Credit.Len() + len(b.Closes) + len(b.signals) + len(b.Opens)
	if owed == 0 || b.State.Stopped() {
		return
	}
	if b.lingerOn {
		b.lingerT.Stop()
	}
	b.lingerOn, b.lingered = true, false
	b.lingerT.Reset(b.retryDelayLocked())
}

func (b *Batcher) owePostedLocked() {
	for _, f := range b.Flying {
		if _, closing := b.Closes[f.ID]; !closing {
			b.Credit.Add(f.ID, f.Delta)
			b.Mx.N.CreditReposted.Add(uint64(f.Delta))
		}
	}
	for id, reason := range b.FlyingCloses {
		if _, ok := b.Closes[id]; !ok {
			b.Closes[id] = reason
			b.Credit.Delete(id)
		}
	}
	for id, sg := range b.flyingSignals {
		if _, ok := b.signals[id]; !ok {
			b.signals[id] = sg
		}
	}
}

// retire settles s's retirement under the batcher's lock.
func (s *OutSlot) retire(out retire.Outcome) {
	s.B.Mu.Lock()
	if s.Known() == 0 {
		s.SettleLocked(out)
	}
	s.B.Mu.Unlock()
}

// Build takes what may go now into one batch. It returns nil when there is
// nothing; more says that a clamp cut the batch and more is ready.
//
// Queued OpenSlots go first in the batch, ahead of any data: a slot's
// records must not overtake its open, and an open that shares the batch
// of its stream's first records saves a write. opened lists them; the
// caller records the post's result on each.
func (b *Batcher) Build(ob *batchBuf) (batch []byte, records int, retired, opened []*OutSlot, more bool) {
	b.Mu.Lock()
	defer b.Mu.Unlock()
	if !b.State.BuildsData() {
		// Goodbye closed every slot: nothing may follow it. Or a successor
		// may write on the lane already: what is owed goes through it
		// (handBack), and this batcher's epoch must not reach the peer.
		b.Awake = false
		b.sleptLocked()
		return nil, 0, nil, nil, false
	}
	data := b.autoFlush() || b.lingerReadyLocked()
	lingerDone := !b.lingerOn || b.lingered
	if !data && len(b.Opens) == 0 && len(b.Closes) == 0 && len(b.signals) == 0 && !(b.Credit.Len() > 0 && lingerDone) && !b.hasUrgentLocked() {
		b.Awake = false
		b.sleptLocked()
		return nil, 0, nil, nil, false
	}
	var enc muxwire.Encoder
	// A pooled buffer comes back once the transport copied or wrote the
	// batch; without a pool each batch needs its own, sized from the last
	// one so that it is made once, not grown.
	enc.Start(ob.bytes(b.sizeHint()), b.Lane, b.Epoch, b.seq+1)
	limit := b.Mx.Cfg.MaxBatchBytes
	full := func(n int) bool {
		return enc.Len()+muxwire.RecordLen(n) > limit && enc.Count() > 0 || enc.Count() == muxwire.MaxRecords
	}
	opened = b.takeOpensLocked(&enc, full)
	for id, reason := range b.Closes {
		if full(muxwire.CloseSlotBodyLen) {
			break
		}
		enc.CloseSlot(id, 0, reason)
		delete(b.Closes, id)
		b.FlyingCloses[id] = reason // a reject stays on the reject lane until it is posted
	}
	for id, sg := range b.signals {
		if full(muxwire.LifecycleSlotBodyLen) {
			break
		}
		enc.LifecycleSlot(id, 0, sg.session, sg.action)
		delete(b.signals, id)
		b.flyingSignals[id] = sg
	}
	b.takeCreditLocked(&enc, full)
	if b.lingerOn {
		b.lingerT.Stop()
		b.lingerOn, b.lingered = false, false
	}
	keep := b.Ready[:0]
	cut := len(b.Opens) > 0 // an open left for the next batch: its slot's data must not go first
	beforeData := enc.Count()
	for i, s := range b.Ready {
		if cut {
			keep = append(keep, b.Ready[i:]...)
			break
		}
		if !data && !s.Life.Terminal() && !s.owedLocked() {
			keep = append(keep, s)
			continue
		}
		limit := -1 // everything credit allows
		if !data && !s.Life.Terminal() {
			limit = s.Flushable // what the last FlushBatch released
		}
		var done bool
		done, cut = b.drainSlotLocked(s, &enc, full, limit)
		if done {
			if retired == nil {
				retired = b.retiredBuf[:0]
			}
			retired = append(retired, s)
		}
		if cut && len(s.Q) > 0 && !s.Life.Closed() {
			keep = append(keep, s)
			continue
		}
		s.InReady = false
		if !s.Life.Closed() && s.readyAgainLocked() {
			keep = append(keep, s)
		}
	}
	clear(b.Ready[len(keep):])
	b.Ready = keep
	if enc.Count() > beforeData {
		b.dataWrittenLocked()
	}
	more = cut || len(b.Opens) > 0 || len(b.Closes) > 0 || b.Credit.Len() > 0 || len(b.signals) > 0
	if !more {
		if len(b.Ready) == 0 || !data {
			b.Awake = false
		}
	}
	if enc.Count() == 0 {
		b.Awake = more
		b.sleptLocked()
		return nil, 0, retired, nil, false
	}
	b.sleptLocked() // the last batch of the pass
	b.seq++
	b.lastLen = enc.Len()
	return enc.Batch(), enc.Count(), retired, opened, more || len(b.Ready) > 0 && data
}

// takeCreditLocked writes the owed credit that fits into enc and moves
// it to b.Flying. A frontend owes credit on every stream of a forward
// pass, and most often all of it fits: the owed list then moves to the
// flying list whole and is cleared at once; a batch names each slot once.
func (b *Batcher) takeCreditLocked(enc *muxwire.Encoder, full func(int) bool) {
	owed := b.Credit.All()
	for n, c := range owed {
		if full(muxwire.CreditUpdateBodyLen) {
			b.Flying = append(b.Flying, owed[:n]...)
			b.Credit.dropFirst(n)
			return
		}
		enc.CreditUpdate(c.ID, 0, c.Delta)
	}
	b.Flying = append(b.Flying, owed...)
	b.Credit.Clear()
}

// FlyingCreditLocked is the credit for id in the batch being posted.
func (b *Batcher) FlyingCreditLocked(id muxwire.SlotID) uint32 {
	for _, f := range b.Flying {
		if f.ID == id {
			return f.Delta
		}
	}
	return 0
}

// takeOpensLocked writes the queued OpenSlots that fit into enc and
// returns them. An open whose slot an epoch death ended meanwhile is
// dropped: its peer never hears of it.
func (b *Batcher) takeOpensLocked(enc *muxwire.Encoder, full func(int) bool) []*OutSlot {
	if len(b.Opens) == 0 {
		return nil
	}
	opened := b.openedBuf[:0]
	n := 0
	for _, s := range b.Opens {
		if s.Life.Closed() {
			s.openErr, s.openDone = streamerr.ErrCancelled, true
			b.openPostedLocked()
			n++
			continue
		}
		if full(muxwire.OpenSlotBodyLen) {
			break
		}
		enc.OpenSlot(s.ID, s.openSeq, s.anchorID, s.Session)
		opened = append(opened, s)
		n++
	}
	rest := copy(b.Opens, b.Opens[n:])
	clear(b.Opens[rest:])
	b.Opens = b.Opens[:rest]
	return opened
}

// sleptLocked runs the test seam as a pass marks the batcher asleep.
func (b *Batcher) sleptLocked() {
	if !b.Awake && b.TestOnSleep != nil {
		b.TestOnSleep()
	}
}

// handedOnLocked reports whether a reply for the peer must go to the
// lane's current batcher instead of b: eviction or peer loss took b out of
// the mux. handBack passes on what b held before; what comes after goes
// straight to the successor. When it reports true it has unlocked b.mu.
func (b *Batcher) handedOnLocked() bool {
	if !b.State.HandsOn() {
		return false
	}
	b.Mu.Unlock()
	return true
}

// handOn gives a reply to the lane's current batcher. After peer loss the
// reply is dropped: the peer's slots here ended with it.
func (b *Batcher) handOn(f func(nb *Batcher)) {
	b.Mu.Lock()
	lost := b.State.DropsReplies()
	b.Mu.Unlock()
	if lost {
		return
	}
	if nb, err := b.Mx.BatcherFor(b.peer, b.Lane); err == nil && nb != b {
		f(nb)
	}
}

func (b *Batcher) hasUrgentLocked() bool {
	for _, s := range b.Ready {
		if s.Life.Terminal() || s.owedLocked() {
			return true
		}
	}
	return false
}

// readyAgainLocked re-lists a slot that still has sendable records.
func (s *OutSlot) readyAgainLocked() bool {
	if len(s.Q) == 0 || (s.Credit == 0 && !s.headIsTerminal()) {
		return false
	}
	s.InReady = true
	return true
}

// drainSlotLocked writes s's records into enc while it has credit and the
// batch has room. A terminal is written with its CloseSlot and ends the
// slot; done says so. cut says the batch is full.
func (b *Batcher) drainSlotLocked(s *OutSlot, enc *muxwire.Encoder, full func(int) bool, limit int) (done, cut bool) {
	n, drained := 0, 0
	for n < len(s.Q) && n != limit {
		rec := s.Q[n]
		last := s.Life.Terminal() && n == len(s.Q)-1
		if !last && s.Credit == 0 {
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
		if enc.Count() == 0 && len(rec) > b.Mx.Cfg.MaxBatchBytes {
			// Alone in its batch and larger than a batch: the messenger
			// will stage it. The tag names the stream, so that a receiver
			// that refuses it for its size ends this stream and no other.
			b.singletonTag = fmt.Sprintf("%d:%d:%d", b.Epoch, uint32(s.ID), s.Session)
		}
		enc.Data(s.ID, s.Seq, rec)
		s.Seq++
		s.qBytes -= len(rec)
		b.qBytes -= len(rec)
		drained += len(rec)
		n++
		if last {
			enc.CloseSlot(s.ID, s.Seq, muxwire.TerminalSent)
			s.Seq++
			s.Life.Close()
			b.releaseLocked(s)
			done = true
			n = len(s.Q) // the terminal was the last record
			break
		}
		s.Credit--
	}
	s.Flushable = max(0, s.Flushable-n)
	if drained > 0 {
		b.budgetAddLocked(-drained) // once per slot and batch, not per record
	}
	if n > 0 {
		// Shift the rest down rather than reslice, so the queue keeps its
		// array (at most about C+1 records) and a steady stream queues
		// without allocating.
		rest := copy(s.Q, s.Q[n:])
		clear(s.Q[rest:])
		s.Q = s.Q[:rest]
		if rest == 0 {
			b.staged--
			s.Arena = s.Arena[:0] // every record in it went into the batch
		}
		s.wakeSpaceLocked()
		b.peerRoomLocked()
	}
	if done {
		b.RecycleLocked(s) // every record went into the batch
	}
	if !done && s.Credit == 0 && len(s.Q) > 0 && !s.headIsTerminal() {
		b.Mx.creditExhausted()
	}
	return done, cut
}
