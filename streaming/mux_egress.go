package streaming

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"
	"unsafe"

	"github.com/velo-go/velo/ext"
	"github.com/velo-go/velo/internal/msgrx"
	"github.com/velo-go/velo/internal/muxwire"
	wire "github.com/velo-go/velo/internal/streamwire"
)

// The producer's side of the messenger mux (docs/mux.md, "How it works").
//
// Every stream to one peer is a slot of that peer's batcher. A Send puts
// its frame in the slot's queue under the batcher's lock and wakes the
// batcher only when the slot becomes ready (it had nothing sendable) and
// the batcher is asleep: one wake per batch, never one per record. The
// batcher's goroutine takes every ready slot's records up to its credit,
// writes them into one _stream_batch, and posts it. A slot without credit
// keeps its records queued (the book's withheld queue); the Send that
// finds the queue full waits, and other slots go on.
//
// One lock per batcher guards its slots; the batcher holds it only while
// it copies records into the batch buffer, never while it posts.

// batcher is the egress of one (peer, lane).
type batcher struct {
	mx   *mux
	peer ext.WorkerID
	lane int

	// Who writes the lane (mux_writer.go); guarded by mu.
	writing     bool          // someone owns the lane's writes
	rerun       bool          // a pass found the lane taken: the owner wakes the goroutine as it lets go
	jobs        []laneJob     // control work queued for the lane's writer
	openWaiters int           // attaches waiting for their OpenSlot to be posted
	openCh      chan struct{} // closed when OpenSlots were posted; made by a waiter

	mu            sync.Mutex
	epoch         uint64
	seq           uint32 // the last batch_seq used in this epoch
	slots         []*outSlot
	gens          []uint8  // generation of each index ever allocated
	free          []uint32 // free indices, last in first out
	live          int      // open slots
	ready         []*outSlot
	opens         []*outSlot                             // OpenSlots queued for the next write (open)
	singletonTag  string                                 // the _mux_slot header of the batch being built, if it is a singleton
	lastLen       int                                    // the size of the last batch built: the next buffer's hint
	rejected      map[muxwire.SlotID]struct{}            // answers to unadmitted OpenSlots, owed or in the batch being posted
	staged        int                                    // slots with records queued: OnComplete compares it to live
	windowT       *time.Timer                            // FlushLinger: the data window of the oldest staged record
	windowArmed   bool                                   // windowT runs
	windowDue     bool                                   // windowT fired: staged data may go
	lastData      time.Time                              // the last write that carried data
	qBytes        int                                    // bytes queued on every slot of this batcher (AtBytes)
	unpublished   int                                    // queued bytes not yet added to the peer's budget (budgetAddLocked)
	budget        *peerBudget                            // the peer's byte budget, shared by its lanes
	credit        map[muxwire.SlotID]uint32              // CreditUpdate replies owed for the peer's slots
	flying        map[muxwire.SlotID]uint32              // credit in the batch being posted: owed again if it is refused
	flyingCloses  map[muxwire.SlotID]muxwire.CloseReason // closes in the batch being posted
	flyingSignals map[muxwire.SlotID]lifecycleSignal     // stops and cancels in the batch being posted
	closes        map[muxwire.SlotID]muxwire.CloseReason // CloseSlot replies owed for the peer's slots
	signals       map[muxwire.SlotID]lifecycleSignal     // LifecycleSlot records owed for the peer's slots
	awake         bool                                   // the goroutine is building; no wake needed
	state         batcherState                           // where it is in its life (mux_batcher_state.go)
	used          bool                                   // control passed through since the last idle check (see idle)
	pendingN      int                                    // slots whose pipelined attach is unanswered
	lingerT       *time.Timer                            // reply_linger of a batch of only credit replies; the goroutine waits on it too
	lingerOn      bool                                   // a reply_linger window runs on lingerT
	lingered      bool                                   // lingerT fired: the replies may go
	lastUse       time.Time
	refusals      int // posts refused in a row (mux_hostile.go)

	// Test seams, nil outside tests. Each runs under mu: testOnWake at
	// the start of a wake, before the batcher marks itself awake;
	// testOnSleep as a pass that found nothing more marks it asleep.
	testOnWake, testOnSleep func()

	bufs bufPool // idle batch buffers (mux_bufpool.go)
	// Arenas and queue arrays of ended slots, for the next slots: a
	// stream of a few dozen tokens would otherwise grow both from nothing.
	// Guarded by mu.
	freeArenas [][]byte
	freeQueues [][][]byte

	wake chan struct{} // cap 1
	done chan struct{} // closed when the goroutine returns
}

// outSlot is one stream of this node on the batcher: the sender's side of
// a slot. It is guarded by the batcher's lock.
type outSlot struct {
	b        *batcher
	handle   wire.AnchorHandle
	id       muxwire.SlotID
	anchorID uint64
	session  uint64 // the routing session the owner answered with

	q      [][]byte // records not yet written: the inlet and the withheld queue
	arena  []byte   // where pushBytes encodes records; reset once q is empty
	spare  []byte   // the arena before it, reused once no queued record is in it
	qBytes int
	credit uint32 // data credit the consumer granted and this side has not spent
	window uint32 // the credit it opened with: no grant lifts credit above it
	seq    uint32 // next frame_seq
	// flushable is how many records at the head of q a FlushBatch
	// released under FlushManual: they go as credit allows, and what was
	// queued after the call waits for the next one.
	flushable int
	inReady   bool
	active    bool   // a record was queued since the last heartbeat
	openSeq   uint32 // the frame_seq of its OpenSlot
	openErr   error  // why its OpenSlot was not written
	openDone  bool   // its OpenSlot was posted or dropped: openErr says how

	// A pipelined attach (mux_pipeline.go) opens the slot before the
	// owner answers: pending holds its records back until the answer,
	// answered closes with it, and failErr is why the owner refused.
	pending     bool
	pendingWalk uint64          // the mux's walk count when the attach was sent
	call        msgrx.AsyncCall // the attach request, given up on when it expires
	answered    chan struct{}
	failErr     error

	life      streamLife // ended by the application, gone (mux_stream_life.go)
	cancelled bool
	stopped   bool
	stopCh    chan struct{} // closed by a consumer's stop only
	cancelCh  chan struct{} // closed by a cancel or a loss
	doneCh    chan struct{} // closed by the first of the two
	why       error         // the first signal's cause (Sender.Context)
	onFire    []func(error) // Sender.Context's cancel, run by the first signal
	spaceWait chan struct{}
	retirement
}

func newBatcher(mx *mux, peer ext.WorkerID, lane int) *batcher {
	b := &batcher{
		mx: mx, peer: peer, lane: lane, budget: mx.budgetFor(peer),
		epoch:         mx.epochs.Add(1),
		credit:        make(map[muxwire.SlotID]uint32),
		flying:        make(map[muxwire.SlotID]uint32),
		flyingCloses:  make(map[muxwire.SlotID]muxwire.CloseReason),
		flyingSignals: make(map[muxwire.SlotID]lifecycleSignal),
		closes:        make(map[muxwire.SlotID]muxwire.CloseReason),
		rejected:      make(map[muxwire.SlotID]struct{}),
		signals:       make(map[muxwire.SlotID]lifecycleSignal),
		wake:          make(chan struct{}, 1),
		done:          make(chan struct{}),
		lingerT:       time.NewTimer(time.Hour),
	}
	b.lingerT.Stop()
	b.lastUse = time.Now()
	go b.run()
	return b
}

// open allocates a slot for a stream the owner bound as (anchorID,
// session), and posts its OpenSlot before it returns, so that the owner's
// accept window measures the attach and not the first token. The slot
// starts with credit.
//
// OpenSlots go out by group commit: each attach queues its record, and
// whoever then owns the lane's writes posts every queued one in one batch.
// An attach that finds the lane free writes at once; one that comes while
// a batch is being written waits for the owner, which posts the queued
// opens before it lets go, so they share one write instead of each paying
// a system call.
func (b *batcher) open(anchorID, session uint64, credit uint32) (*outSlot, error) {
	b.mu.Lock()
	if !b.state.mayWrite() {
		b.mu.Unlock()
		return nil, ErrCancelled
	}
	idx, ok := b.allocLocked()
	if !ok {
		b.mu.Unlock()
		return nil, errSlotsExhausted
	}
	id, _ := muxwire.NewSlotID(idx, b.gens[idx])
	s := &outSlot{b: b, id: id, anchorID: anchorID, session: session, credit: credit, window: credit, q: b.queueLocked()}
	b.slots[idx] = s
	b.live++
	b.lastUse = time.Now()
	s.openSeq = s.seq
	s.seq++
	b.opens = append(b.opens, s)
	if b.mx.cfg.AsyncOpenAck {
		b.mu.Unlock()
		b.signal() // the batcher writes queued OpenSlots before any data
		return s, nil
	}
	own := b.ownLocked()
	if !own {
		b.openWaiters++ // the owner posts it before it lets go
	}
	b.mu.Unlock()
	var err error
	if own {
		b.postOpens()
		b.release()
		err = b.awaitOpen(s) // posted by now: no wait
	} else {
		b.signal()
		err = b.awaitOpen(s)
		b.mu.Lock()
		b.openWaiters--
		b.mu.Unlock()
	}
	if err != nil {
		return nil, err
	}
	return s, nil
}

// postOpens writes every queued OpenSlot in one batch and records the
// result on each slot. The caller owns the lane's writes.
func (b *batcher) postOpens() {
	b.mu.Lock()
	opens := b.opens
	if len(opens) == 0 {
		b.mu.Unlock()
		return // an earlier pass wrote ours
	}
	b.opens = nil
	live := opens[:0:0]
	for _, s := range opens {
		if s.life.closed() { // an epoch death came first: its peer never hears of it
			s.openErr, s.openDone = ErrCancelled, true
		} else {
			live = append(live, s)
		}
	}
	opens = live
	b.openPostedLocked()
	b.mu.Unlock()
	if len(opens) == 0 {
		return
	}
	err := b.postOpenSlots(opens)
	gone := errors.Is(err, errNoLongerWrites)
	switch {
	case gone:
		// Taken out of the mux: nothing was written, and no epoch died.
		// The attaches open on the lane's current batcher.
		err = ErrCancelled
	case err != nil:
		b.postRefused(err) // epoch death: ends the slots just opened too
	}
	b.mu.Lock()
	for _, s := range opens {
		if gone {
			s.endLocked(ErrCancelled)
		}
	}
	b.openedLocked(opens, err)
	b.mu.Unlock()
}

// allocLocked takes a free index (the last freed first) or a new one.
func (b *batcher) allocLocked() (uint32, bool) {
	if n := len(b.free); n > 0 {
		idx := b.free[n-1]
		b.free = b.free[:n-1]
		return idx, true
	}
	if len(b.slots) > muxwire.MaxSlotIndex || len(b.slots) >= maxMuxSlots {
		return 0, false
	}
	b.slots = append(b.slots, nil)
	b.gens = append(b.gens, 0)
	return uint32(len(b.slots) - 1), true
}

// releaseLocked frees s's index with its generation bumped, so that a
// late record for the old stream cannot reach the next one.
func (b *batcher) releaseLocked(s *outSlot) {
	idx := s.id.Index()
	if b.slots[idx] != s {
		return
	}
	b.slots[idx] = nil
	b.gens[idx]++
	b.free = append(b.free, idx)
	b.live--
	b.lastUse = time.Now()
}

// maxMuxRecord is the largest record the mux carries inline: one that
// goes alone in a batch of the messenger's largest frame. A larger record
// is refused with ItemTooLargeError; one above the messenger's staging
// threshold and below this goes alone in its batch, which the messenger
// stages by rendezvous.
const maxMuxRecord = wire.MaxTCPFrame - 1024

// push queues one record of s, waiting while its queue is full.
func (s *outSlot) push(ctx context.Context, frame []byte) error {
	return s.pushFrame(ctx, frame, nil, len(frame))
}

// pushBytes queues a byte item of payload, encoded straight into the
// slot's arena: no buffer per record.
func (s *outSlot) pushBytes(ctx context.Context, payload []byte) error {
	n := wire.BytesItemLen(len(payload))
	if n > maxArenaFrame {
		return s.push(ctx, bytesItemFrame(payload))
	}
	return s.pushFrame(ctx, nil, payload, n)
}

// pushFrame queues frame, or, when frame is nil, the byte item of payload
// (n bytes either way), waiting while the queue is full.
func (s *outSlot) pushFrame(ctx context.Context, frame, payload []byte, n int) error {
	if n > maxMuxRecord {
		return &ItemTooLargeError{Size: n, Limit: maxMuxRecord}
	}
	b := s.b
	waited := false
	b.mu.Lock()
	for {
		switch {
		case s.life.terminal():
			b.mu.Unlock()
			return ErrSenderClosed
		case s.cancelled || s.life.closed():
			b.mu.Unlock()
			return s.endErr()
		case len(s.q) < b.mx.cfg.inletRecords() && (s.qBytes == 0 || s.qBytes+n <= b.mx.cfg.SlotByteBudget) &&
			(len(s.q) == 0 || b.budget.fits(b.unpublished+n, b.mx.cfg.PeerByteBudget)):
			// A slot's first record always fits, so a stream can always move,
			// whatever the others to the peer hold.
			if frame == nil {
				frame = s.arenaFrameLocked(payload, n)
			}
			s.enqueueLocked(frame)
			s.active = true
			wake := s.readyLocked()
			if !wake && b.mx.cfg.Flush == FlushLinger {
				wake = b.lingerWakeLocked()
			}
			b.mu.Unlock()
			if wake {
				b.signal()
			}
			return nil
		}
		if !waited {
			waited = true
			b.mx.producerBackpressure()
		}
		w := s.waitChanLocked(n)
		b.mu.Unlock()
		select {
		case <-w:
		case <-ctx.Done():
			return ctx.Err()
		}
		b.mu.Lock()
	}
}

// waitChanLocked is what a Send of n bytes that does not fit waits on: the
// slot's own room, or, when only the peer's byte budget is full, room
// anywhere on the peer.
func (s *outSlot) waitChanLocked(n int) chan struct{} {
	b := s.b
	slotFull := len(s.q) >= b.mx.cfg.inletRecords() || s.qBytes+n > b.mx.cfg.SlotByteBudget
	if !slotFull {
		return b.budget.waitChan()
	}
	if s.spaceWait == nil {
		s.spaceWait = make(chan struct{})
	}
	return s.spaceWait
}

// budgetChunk is how many queued bytes a batcher gathers before it adds
// them to the peer's shared budget. The budget is one atomic counter for
// every lane to the peer, and adding to it per record made producers and
// the batcher trade its cache line for every token. A peer may so run
// over its budget by up to a chunk per lane.
const budgetChunk = 4 << 10

// budgetAddLocked counts delta queued bytes (negative: written or
// dropped) against the peer's budget. Additions gather up to budgetChunk;
// a release goes out at once, with what had gathered, so that a Send
// waiting for room sees it. The caller holds b.mu.
func (b *batcher) budgetAddLocked(delta int) {
	b.unpublished += delta
	if b.unpublished >= budgetChunk || delta < 0 {
		b.budget.add(b.unpublished)
		b.unpublished = 0
	}
}

// peerRoomLocked wakes the Sends that wait for the peer's byte budget once
// the queued bytes fell under it.
func (b *batcher) peerRoomLocked() { b.budget.room(b.mx.cfg.PeerByteBudget) }

// peerBudget is the bytes queued on every lane to one peer: all the lanes
// of a peer share one budget, so the bound per peer does not depend on
// the lane count. Its lock is a leaf.
type peerBudget struct {
	bytes atomic.Int64
	hold  atomic.Int64 // bytes in the ingress holds of the peer's slots, every lane
	mu    sync.Mutex
	wait  chan struct{}
}

func (pb *peerBudget) fits(n, limit int) bool { return pb.bytes.Load()+int64(n) <= int64(limit) }

func (pb *peerBudget) add(n int) { pb.bytes.Add(int64(n)) }

// waitChan is what a Send waits on for room on the peer.
func (pb *peerBudget) waitChan() chan struct{} {
	pb.mu.Lock()
	defer pb.mu.Unlock()
	if pb.wait == nil {
		pb.wait = make(chan struct{})
	}
	return pb.wait
}

// room wakes the waiting Sends once the peer is under its budget.
func (pb *peerBudget) room(limit int) {
	if pb.bytes.Load() >= int64(limit) {
		return
	}
	pb.mu.Lock()
	if pb.wait != nil {
		close(pb.wait)
		pb.wait = nil
	}
	pb.mu.Unlock()
}

// waiting says whether a Send waits for the peer's budget (tests).
func (pb *peerBudget) waiting() bool {
	pb.mu.Lock()
	defer pb.mu.Unlock()
	return pb.wait != nil
}

// enqueueLocked appends a record to s's queue.
func (s *outSlot) enqueueLocked(frame []byte) {
	if len(s.q) == 0 {
		s.b.staged++
	}
	s.q = append(s.q, frame)
	s.qBytes += len(frame)
	s.b.qBytes += len(frame)
	s.b.budgetAddLocked(len(frame))
}

// owedLocked says a FlushBatch came while s held records it could not
// send for lack of credit. Under FlushManual those go when credit
// returns, without another FlushBatch: the application asked for them,
// and the credit it waited for may come long after.
func (s *outSlot) owedLocked() bool {
	return s.flushable > 0 && len(s.q) > 0
}

// readyLocked lists s for the batcher when it has something it may send,
// and says whether the batcher must be woken to see it.
func (s *outSlot) readyLocked() bool {
	if s.inReady || s.pending || len(s.q) == 0 || (s.credit == 0 && !s.headIsTerminal()) {
		return false
	}
	b := s.b
	s.inReady = true
	b.ready = append(b.ready, s)
	// A slot that holds a terminal is urgent under every policy, also when
	// credit comes back for the records in front of it: else, under
	// FlushManual, the end of a stream would wait for a FlushBatch.
	return !b.awake && (b.autoFlush() || s.life.terminal() || s.owedLocked() ||
		b.windowDue) // under FlushLinger, a window that ended while this slot had no credit
}

func (s *outSlot) headIsTerminal() bool { return s.life.terminal() && len(s.q) == 1 }

// terminate queues a terminal past the queue's limit; it never waits. The
// batcher writes it behind every record before it, with CloseSlot in the
// same batch, and then retires the stream.
//
// With wait, a slot whose pipelined attach the owner has not answered yet
// first waits for the answer, so that Finalize and Detach report a refused
// attach; Close does not wait.
func (s *outSlot) terminate(frame []byte, wait bool) error {
	b := s.b
	if wait && s.answered != nil {
		<-s.answered
	}
	b.mu.Lock()
	if s.life.terminal() {
		b.mu.Unlock()
		return ErrSenderClosed
	}
	s.life.end()
	if s.cancelled || s.life.closed() {
		s.settleLocked(RetireDiscarded)
		b.mu.Unlock()
		return s.endErr()
	}
	s.enqueueLocked(frame)
	wake := s.readyLocked()
	s.wakeSpaceLocked()
	urgent := !b.awake && !wake && s.inReady // listed but the policy waits: a terminal makes its batch urgent
	b.mu.Unlock()
	if wake || urgent {
		b.signal()
	}
	return nil
}

// endErr is what a send on a closed or cancelled slot returns: the
// owner's refusal for a pipelined attach, else ErrCancelled.
func (s *outSlot) endErr() error {
	if s.failErr != nil {
		return s.failErr
	}
	return ErrCancelled
}

func (s *outSlot) wakeSpaceLocked() {
	if s.spaceWait != nil {
		close(s.spaceWait)
		s.spaceWait = nil
	}
}

// grant adds credit the consumer returned and lists the slot again. The
// credit never goes above the window the slot opened with: a grant that
// would lift it there is a liar's (or a repeat), counted in
// control_refused, and cannot let this side send past the window.
func (b *batcher) grant(id muxwire.SlotID, delta uint32) {
	b.mu.Lock()
	s := b.slotLocked(id)
	if s == nil || s.life.closed() {
		b.refuseLocked(id)
		b.mu.Unlock()
		return
	}
	if s.clampCreditLocked(delta) {
		b.mx.controlRefused()
	}
	wake := s.readyLocked()
	b.mu.Unlock()
	if wake {
		b.signal()
	}
}

// slotLocked is the live slot with exactly id, or nil.
func (b *batcher) slotLocked(id muxwire.SlotID) *outSlot {
	idx := id.Index()
	if int(idx) >= len(b.slots) {
		return nil
	}
	if s := b.slots[idx]; s != nil && s.id == id {
		return s
	}
	return nil
}

// signal wakes the batcher's goroutine; a wake already pending is enough.
func (b *batcher) signal() {
	select {
	case b.wake <- struct{}{}:
	default:
	}
}

// autoFlush is true under the default policy: write at the end of every
// wake. Under Manual, data waits for FlushBatch.
func (b *batcher) autoFlush() bool { return b.mx.cfg.Flush == FlushAuto }

// kick is FlushBatch for this batcher: the next wake writes what is
// staged, whatever the policy.
//
// Under FlushManual it releases exactly what each slot holds now: records
// staged after the call wait for the next one, so one call is one pass.
// It looks at every slot of the batcher, once per call.
func (b *batcher) kick() {
	b.mu.Lock()
	if !b.autoFlush() {
		for _, s := range b.slots {
			if s != nil && !s.life.closed() && len(s.q) > 0 {
				s.flushable = len(s.q)
				s.readyLocked()
			}
		}
	}
	b.mu.Unlock()
	b.signal()
}

// reply queues a CreditUpdate for a slot the peer owns on this node's
// ingress. Replies coalesce per slot; a batch of only replies waits up to
// reply_linger for company.
func (b *batcher) reply(id muxwire.SlotID, delta uint32) {
	b.mu.Lock()
	if b.handedOnLocked() {
		b.handOn(func(nb *batcher) { nb.reply(id, delta) })
		return
	}
	b.used = true
	if _, closing := b.closes[id]; !closing {
		b.credit[id] += delta
	}
	if !b.lingerOn && !b.awake {
		b.startLingerLocked()
	}
	b.mu.Unlock()
}

// startLingerLocked opens a reply_linger window. The batcher's goroutine
// waits on the window's timer itself, so its end is one wake, not a timer
// goroutine that then wakes the batcher. The end marks the window over,
// not only wakes the batcher: under FlushManual nothing else would let the
// replies go, and the peer's producers would wait for credit for good.
func (b *batcher) startLingerLocked() {
	b.lingerOn = true
	b.lingerT.Reset(b.mx.cfg.ReplyLinger)
}

// maxRejects caps the answers owed for OpenSlots that ingress never
// admitted: a burst of bogus OpenSlots must not grow the batcher without
// bound. Dropping one costs no credit, which is why a cap is safe here and
// nowhere else.
const maxRejects = 8192

// rejectOpen queues the answer to an OpenSlot this side never admitted, on
// the capped reject lane.
func (b *batcher) rejectOpen(id muxwire.SlotID, reason muxwire.CloseReason) {
	b.mu.Lock()
	if b.handedOnLocked() {
		b.handOn(func(nb *batcher) { nb.rejectOpen(id, reason) })
		return
	}
	if _, known := b.rejected[id]; !known {
		if len(b.rejected) >= maxRejects {
			b.mu.Unlock()
			b.mx.controlRefused()
			return
		}
		b.rejected[id] = struct{}{}
	}
	b.closes[id] = reason
	b.mu.Unlock()
	b.signal()
}

// replyClose queues a CloseSlot for a slot the peer owns; it supersedes
// the slot's credit and is urgent.
func (b *batcher) replyClose(id muxwire.SlotID, reason muxwire.CloseReason) {
	b.mu.Lock()
	if b.handedOnLocked() {
		b.handOn(func(nb *batcher) { nb.replyClose(id, reason) })
		return
	}
	delete(b.credit, id)
	b.closes[id] = reason
	b.mu.Unlock()
	b.signal()
}

// lifecycleSignal is a stop or cancel a consumer sends its producer.
type lifecycleSignal struct {
	session uint64
	action  muxwire.LifecycleAction
}

// replyLifecycle queues a stop or cancel for a slot the peer owns; a
// cancel wins over a stop of the same session. It is urgent.
func (b *batcher) replyLifecycle(id muxwire.SlotID, session uint64, action muxwire.LifecycleAction) {
	b.mu.Lock()
	if b.handedOnLocked() {
		b.handOn(func(nb *batcher) { nb.replyLifecycle(id, session, action) })
		return
	}
	if old, ok := b.signals[id]; !ok || old.session != session || action == muxwire.Cancel {
		b.signals[id] = lifecycleSignal{session, action}
	}
	b.mu.Unlock()
	b.signal()
}

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
			if _, ok := b.rejected[id]; ok {
				delete(b.rejected, id)
			}
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
	if s.known() == 0 {
		s.settleLocked(out)
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

// closeByPeer ends a slot the owner closed (UnknownSlot: the consumer
// cancelled or dropped its anchor; ProtocolError): the producer's sends
// fail with ErrCancelled and its output is discarded.
func (b *batcher) closeByPeer(id muxwire.SlotID) {
	b.mu.Lock()
	s := b.slotLocked(id)
	if s == nil {
		b.refuseLocked(id)
		b.mu.Unlock()
		return
	}
	s.endLocked(ErrCancelled) // the consumer cancelled or closed its anchor
	b.mu.Unlock()
}

// refuseLocked counts control from the peer for a slot this batcher never
// opened. Control for an index it opened but has since retired is the
// ordinary race of a close crossing the stream's end, and is dropped
// without a count, as the book says.
func (b *batcher) refuseLocked(id muxwire.SlotID) {
	if int(id.Index()) >= len(b.slots) {
		b.mx.controlRefused()
	}
}

// endLocked closes s as cancelled, with why as the cause: signals fire,
// waiting sends fail, the output is discarded, the index is freed.
func (s *outSlot) endLocked(why error) {
	if s.life.closed() {
		return
	}
	s.life.close()
	s.cancelLocked(why)
	s.b.qBytes -= s.qBytes
	s.b.budgetAddLocked(-s.qBytes)
	if len(s.q) > 0 {
		s.b.staged--
	}
	s.qBytes = 0
	s.b.recycleLocked(s) // its records are dropped: nothing points into them
	s.b.peerRoomLocked()
	s.settleLocked(RetireDiscarded)
	s.b.releaseLocked(s)
}

// cancelLocked fires Cancelled (and Done, if no stop fired it first).
func (s *outSlot) cancelLocked(why error) {
	if !s.cancelled {
		s.cancelled = true
		if s.cancelCh != nil {
			close(s.cancelCh)
		}
		s.fireLocked(why)
	}
	s.wakeSpaceLocked()
}

// stopLocked fires Stopped: a consumer's stop of a live stream only.
func (s *outSlot) stopLocked() {
	if !s.stopped && !s.cancelled {
		s.stopped = true
		if s.stopCh != nil {
			close(s.stopCh)
		}
		s.fireLocked(ErrStopRequested)
	}
}

// fireLocked closes Done on the first signal and keeps its cause.
func (s *outSlot) fireLocked(why error) {
	if s.why == nil {
		s.why = why
		if s.doneCh != nil {
			close(s.doneCh)
		}
		for _, fn := range s.onFire {
			fn(why)
		}
		s.onFire = nil
	}
}

// watchFire runs fn with the cause at the first signal, or returns the
// cause if one has fired already.
func (s *outSlot) watchFire(fn func(error)) error {
	s.b.mu.Lock()
	defer s.b.mu.Unlock()
	if s.why != nil {
		return s.why
	}
	s.onFire = append(s.onFire, fn)
	return nil
}

// cause is the first signal's cause, or nil.
func (s *outSlot) cause() error {
	s.b.mu.Lock()
	defer s.b.mu.Unlock()
	return s.why
}

// lifecycle applies a LifecycleSlot from the owner: a stop or a cancel of
// the stream with this session, never of a later stream on the index.
func (b *batcher) lifecycle(id muxwire.SlotID, session uint64, action muxwire.LifecycleAction) {
	b.mu.Lock()
	defer b.mu.Unlock()
	s := b.slotLocked(id)
	if s == nil || s.session != session {
		return
	}
	if action == muxwire.Cancel {
		s.cancelLocked(ErrCancelled)
	} else {
		s.stopLocked()
	}
}

// signalCh returns the channel of one kind of signal of s, made on demand.
func (s *outSlot) signalCh(k signalKind) <-chan struct{} {
	s.b.mu.Lock()
	defer s.b.mu.Unlock()
	var ch *chan struct{}
	var fired bool
	switch k {
	case sigStop:
		ch, fired = &s.stopCh, s.stopped
	case sigCancel:
		ch, fired = &s.cancelCh, s.cancelled
	default:
		ch, fired = &s.doneCh, s.why != nil
	}
	if fired {
		return closedChan
	}
	if *ch == nil {
		*ch = make(chan struct{})
	}
	return *ch
}

func (s *outSlot) retiredCh() <-chan struct{} {
	if s.known() != 0 {
		return closedFor(&s.retirement)
	}
	s.b.mu.Lock()
	defer s.b.mu.Unlock()
	return s.watchLocked()
}

// epochDeath ends every live slot of the batcher (a refused batch, a lost
// peer) and starts a new epoch: the owner retires the old epoch's slots
// when the first batch of the new one arrives.
func (b *batcher) epochDeath() {
	b.mu.Lock()
	for _, s := range b.slots {
		if s != nil {
			s.endLocked(ErrConsumerLost)
		}
	}
	b.ready = b.ready[:0]
	// The replies owed for the peer's slots (credit, closes, stops) stay:
	// those slots belong to the peer's epoch, which this one's death does
	// not end; dropping their credit would stall them for good.
	b.epoch = b.mx.epochs.Add(1)
	b.seq = 0
	b.mu.Unlock()
	b.mx.epochDeaths()
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
func (b *batcher) goodbye(theirs []muxwire.SlotID) {
	b.mu.Lock()
	// From here on the batcher writes only closes and the notices of
	// attaches answered too late (postLate, abandonBound), and an attach
	// answered now fails its slot instead of queuing an OpenSlot.
	b.state.to(batcherClosing)
	// OpenSlots still queued (a pipelined attach answered just before the
	// end) go first: a close for a slot the peer never saw opened would
	// leave its bind waiting out the accept window.
	opens := make([]*outSlot, 0, len(b.opens))
	for _, s := range b.opens {
		if !s.life.closed() {
			opens = append(opens, s)
		}
	}
	clear(b.opens)
	b.opens = b.opens[:0]
	recs := make([]closeReply, 0, b.live+len(theirs))
	for _, s := range b.slots {
		if s != nil && !s.life.closed() && !s.pending { // a pending slot's peer never heard of it
			recs = append(recs, closeReply{id: s.id, reason: muxwire.PeerGone})
		}
	}
	// Closes still owed go too: Manager.Close cancels its anchors just
	// before the mux stops, and the batcher's goroutine may not have
	// written them yet.
	for id, reason := range b.closes {
		recs = append(recs, closeReply{id: id, reason: reason})
	}
	clear(b.closes)
	for _, id := range theirs {
		recs = append(recs, closeReply{id: id, reason: muxwire.UnknownSlot})
	}
	w := b.queueJobLocked(laneJob{kind: jobGoodbye, opens: opens, closes: recs}, true)
	b.mu.Unlock()
	b.writeQueued(w)
}

// postLate writes closes after the batcher was retired, in order with
// what it wrote before. It comes from a reader: the lane's writer writes
// them, and the caller only once the goroutine is gone and the lane free.
func (b *batcher) postLate(closes []closeReply) {
	b.queueJob(laneJob{kind: jobLateCloses, closes: closes}, false)
}

// postOpenSlots writes the OpenSlots of opens, in as many batches as the
// batch cap needs. The caller owns the lane's writes. It returns the first
// refusal.
func (b *batcher) postOpenSlots(opens []*outSlot) error {
	return b.postRecords(len(opens), muxwire.OpenSlotBodyLen, func(enc *muxwire.Encoder, i int) {
		s := opens[i]
		enc.OpenSlot(s.id, s.openSeq, s.anchorID, s.session)
	})
}

// errNoLongerWrites is postRecords' answer once the batcher may not write
// (batcherState.mayWrite).
var errNoLongerWrites = errors.New("velo: the mux batcher was taken out and writes no more")

// postRecords writes n control records with bodies of bodyLen bytes, each
// put in by add, in as many batches of their own as the batch cap needs.
// The caller owns the lane's writes. It stops at the first refusal and
// returns it,
// or errNoLongerWrites.
func (b *batcher) postRecords(n, bodyLen int, add func(enc *muxwire.Encoder, i int)) error {
	per := max(1, min(muxwire.MaxRecords, (b.mx.cfg.MaxBatchBytes-muxwire.BatchHeaderLen)/muxwire.RecordLen(bodyLen)))
	for i := 0; i < n; {
		k := min(n-i, per)
		b.mu.Lock()
		if !b.state.mayWrite() {
			b.mu.Unlock()
			return errNoLongerWrites
		}
		b.seq++
		epoch, seq := b.epoch, b.seq
		b.mu.Unlock()
		var enc muxwire.Encoder
		enc.Start(make([]byte, 0, muxwire.BatchHeaderLen+k*muxwire.RecordLen(bodyLen)), b.lane, epoch, seq)
		for ; k > 0; i, k = i+1, k-1 {
			add(&enc, i)
		}
		if err := b.mx.send(b.peer, b.lane, enc.Batch()); err != nil {
			return err
		}
	}
	return nil
}

// idleLocked says the batcher has no live slot and has not been used for
// ttl. The caller holds b.mu.
//
// A batcher that carries only replies (its node consumes the peer's
// streams and sends none) is in use too: a reply since the last check
// counts as use then, at the cost of a flag per reply rather than a clock
// read.
func (b *batcher) idleLocked(now time.Time, ttl time.Duration) bool {
	if b.used {
		b.used, b.lastUse = false, now
	}
	return b.live == 0 && len(b.credit) == 0 && len(b.closes) == 0 && len(b.signals) == 0 && now.Sub(b.lastUse) >= ttl
}

// stop ends the batcher's goroutine and fails its slots.
func (b *batcher) stop() {
	b.mu.Lock()
	if b.state.stopped() {
		b.mu.Unlock()
		return
	}
	b.state.to(stoppedState[b.state])
	b.lingerT.Stop()
	if b.windowT != nil {
		b.windowT.Stop()
	}
	b.mu.Unlock()
	b.epochDeath()
	b.signal()
	<-b.done
	b.lastWrites() // work queued as the goroutine ended
}

// lastWrites writes, as the goroutine ends, the control work queued for
// it, unless the lane's owner is writing and will.
func (b *batcher) lastWrites() {
	b.mu.Lock()
	own := len(b.jobs) > 0 && b.ownLocked()
	b.mu.Unlock()
	if own {
		b.release()
	}
}

// The FlushLinger policy. A window opens when a record is staged and none
// is open; the staged data goes when it ends, or sooner when OnComplete or
// AtBytes says that more waiting cannot help. One timer per batcher,
// reused: nothing per record.

// lingerWakeLocked is called after a record was staged under FlushLinger:
// it opens the window if none is open, and says whether the batcher must
// write now.
func (b *batcher) lingerWakeLocked() bool {
	if b.awake {
		return false
	}
	if !b.windowArmed && !b.windowDue {
		b.armWindowLocked(b.mx.cfg.MaxLinger)
	}
	return b.earlyLocked(time.Now())
}

// lingerReadyLocked says whether staged data may go now under FlushLinger.
func (b *batcher) lingerReadyLocked() bool {
	return b.mx.cfg.Flush == FlushLinger && (b.windowDue || b.earlyLocked(time.Now()))
}

// earlyLocked is the window's early end: AtBytes staged, or, with
// OnComplete, a record staged on every live slot and the last data write
// at least a window ago (a record that comes too soon waits out the rest).
func (b *batcher) earlyLocked(now time.Time) bool {
	cfg := &b.mx.cfg
	if cfg.AtBytes > 0 && b.qBytes >= cfg.AtBytes {
		return true
	}
	if !cfg.OnComplete || b.live == 0 || b.staged < b.live {
		return false
	}
	if rest := cfg.MaxLinger - now.Sub(b.lastData); rest > 0 {
		if !b.windowArmed {
			b.armWindowLocked(rest)
		}
		return false
	}
	return true
}

func (b *batcher) armWindowLocked(d time.Duration) {
	b.windowArmed = true
	if b.windowT == nil {
		b.windowT = time.AfterFunc(d, b.windowEnd)
	} else {
		b.windowT.Reset(d)
	}
}

// windowEnd is the window timer: the staged data may go.
func (b *batcher) windowEnd() {
	b.mu.Lock()
	b.windowArmed, b.windowDue = false, true
	b.mu.Unlock()
	b.signal()
}

// dataWrittenLocked closes the window after a batch that carried data,
// and opens the next one for what is still staged.
func (b *batcher) dataWrittenLocked() {
	b.lastData = time.Now()
	if b.mx.cfg.Flush != FlushLinger {
		return
	}
	b.windowDue = false
	if b.windowArmed {
		b.windowT.Stop()
		b.windowArmed = false
	}
	if b.staged > 0 {
		b.armWindowLocked(b.mx.cfg.MaxLinger)
	}
}

// sizeHint is the capacity for the next batch buffer: a quarter more than
// the last batch, within the batch cap. Its lock is held.
func (b *batcher) sizeHint() int {
	return min(max(512, b.lastLen+b.lastLen/4), b.mx.cfg.MaxBatchBytes+muxwire.BatchHeaderLen+muxwire.RecordHeaderLen)
}

// takeSingletonTag returns the tag of the batch just built, if any.
func (b *batcher) takeSingletonTag() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	t := b.singletonTag
	b.singletonTag = ""
	return t
}

// Small byte items are encoded into a per-slot arena that is reused once
// every record in it has gone into a batch (the encoder copies them): a
// steady stream of tokens then allocates nothing per record.
const (
	maxArenaFrame = 1 << 10 // larger records get a buffer of their own
	arenaSize     = 2 << 10 // one size, so that any free arena fits the next need
)

// maxFreeArenas bounds the arenas and queue arrays a batcher keeps for
// its next slots.
const maxFreeArenas = 256

// recycleLocked takes s's queue array and arenas for the batcher's next
// slots. The caller holds b.mu, and no queued record of s is left to send.
func (b *batcher) recycleLocked(s *outSlot) {
	if s.q != nil && len(b.freeQueues) < maxFreeArenas {
		clear(s.q[:cap(s.q)])
		b.freeQueues = append(b.freeQueues, s.q[:0])
	}
	for _, a := range [][]byte{s.arena, s.spare} {
		if cap(a) == arenaSize && len(b.freeArenas) < maxFreeArenas {
			b.freeArenas = append(b.freeArenas, a[:0])
		}
	}
	s.q, s.arena, s.spare = nil, nil, nil
}

// queueLocked is an empty queue array for a new slot.
func (b *batcher) queueLocked() [][]byte {
	if n := len(b.freeQueues); n > 0 {
		q := b.freeQueues[n-1]
		b.freeQueues[n-1] = nil
		b.freeQueues = b.freeQueues[:n-1]
		return q
	}
	return make([][]byte, 0, min(b.mx.cfg.inletRecords()+1, 64))
}

// arenaLocked is an empty arena, a freed one when the batcher has one.
func (b *batcher) arenaLocked() []byte {
	if n := len(b.freeArenas); n > 0 {
		a := b.freeArenas[n-1]
		b.freeArenas[n-1] = nil
		b.freeArenas = b.freeArenas[:n-1]
		return a
	}
	return make([]byte, 0, arenaSize)
}

// arenaFrameLocked encodes the byte item of payload (n bytes) into the
// arena and returns it. A full arena is set aside, not grown, since the
// records queued from it point into it; the one set aside before it is
// reused once none of them is queued any more, so a slot whose queue
// never empties (a stream held back by credit) still allocates only
// while its records in flight outgrow its two arenas.
func (s *outSlot) arenaFrameLocked(payload []byte, n int) []byte {
	if cap(s.arena)-len(s.arena) < n {
		next := s.spare[:0]
		if cap(next) < n || s.queuedIn(s.spare) {
			next = s.b.arenaLocked()
		}
		s.arena, s.spare = next, s.arena
	}
	start := len(s.arena)
	s.arena = wire.AppendBytesItem(s.arena, payload)
	end := len(s.arena)
	return s.arena[start:end:end]
}

// queuedIn says whether a record in s's queue lies in arena's memory.
func (s *outSlot) queuedIn(arena []byte) bool {
	if cap(arena) == 0 {
		return false
	}
	lo := uintptr(unsafe.Pointer(unsafe.SliceData(arena)))
	hi := lo + uintptr(cap(arena))
	for _, rec := range s.q {
		if len(rec) == 0 {
			continue
		}
		if p := uintptr(unsafe.Pointer(unsafe.SliceData(rec))); p >= lo && p < hi {
			return true
		}
	}
	return false
}
