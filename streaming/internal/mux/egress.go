package mux

import (
	"errors"
	"sync"
	"sync/atomic"
	"time"

	"github.com/velo-go/velo/ext"
	"github.com/velo-go/velo/internal/muxwire"
	wire "github.com/velo-go/velo/internal/streamwire"
	"github.com/velo-go/velo/metrics"
	"github.com/velo-go/velo/streaming/internal/retire"
	"github.com/velo-go/velo/streaming/internal/streamerr"
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

// Batcher is the egress of one (peer, lane).
type Batcher struct {
	Mx   *Mux
	peer ext.WorkerID
	Lane int

	// Who writes the lane (writer.go); guarded by mu.
	writing     bool            // someone owns the lane's writes
	rerun       bool            // a pass found the lane taken: the owner wakes the goroutine as it lets go
	jobs        []LaneJob       // control work queued for the lane's writer
	OpenWaiters int             // attaches waiting for their OpenSlot to be posted
	openCh      chan struct{}   // closed when OpenSlots were posted; made by a waiter
	ctlEnc      muxwire.Encoder // postRecords' encoder: only the owner of the writes uses it

	Mu            sync.Mutex
	Epoch         uint64
	seq           uint32 // the last batch_seq used in this epoch
	slots         []*OutSlot
	gens          []uint8  // generation of each index ever allocated
	free          []uint32 // free indices, last in first out
	live          int      // open slots
	Ready         []*OutSlot
	Opens         []*OutSlot                             // OpenSlots queued for the next write (open)
	spareOpens    []*OutSlot                             // an empty array for Opens, kept by postOpens
	retiredBuf    []*OutSlot                             // Build's list of retired slots, reused by the writer
	openedBuf     []*OutSlot                             // Build's list of opened slots, reused by the writer
	singletonTag  string                                 // the _mux_slot header of the batch being built, if it is a singleton
	lastLen       int                                    // the size of the last batch built: the next buffer's hint
	rejected      map[muxwire.SlotID]struct{}            // answers to unadmitted OpenSlots, owed or in the batch being posted
	staged        int                                    // slots with records queued: OnComplete compares it to live
	windowT       *time.Timer                            // FlushLinger: the data window of the oldest staged record
	WindowArmed   bool                                   // windowT runs
	windowDue     bool                                   // windowT fired: staged data may go
	lastData      time.Time                              // the last write that carried data
	qBytes        int                                    // bytes queued on every slot of this batcher (AtBytes)
	unpublished   int                                    // queued bytes not yet added to the peer's budget (budgetAddLocked)
	Budget        *peerBudget                            // the peer's byte budget, shared by its lanes
	Credit        CreditOwed                             // CreditUpdate replies owed for the peer's slots
	Flying        []SlotCredit                           // credit in the batch being posted, a slot once: owed again if it is refused
	FlyingCloses  map[muxwire.SlotID]muxwire.CloseReason // closes in the batch being posted
	flyingSignals map[muxwire.SlotID]lifecycleSignal     // stops and cancels in the batch being posted
	Closes        map[muxwire.SlotID]muxwire.CloseReason // CloseSlot replies owed for the peer's slots
	signals       map[muxwire.SlotID]lifecycleSignal     // LifecycleSlot records owed for the peer's slots
	Awake         bool                                   // the goroutine is building; no wake needed
	State         BatcherState                           // where it is in its life (batcher_state.go)
	used          bool                                   // control passed through since the last idle check (see idle)
	pendingN      int                                    // slots whose pipelined attach is unanswered
	lingerT       *time.Timer                            // reply_linger of a batch of only credit replies; the goroutine waits on it too
	lingerOn      bool                                   // a reply_linger window runs on lingerT
	lingered      bool                                   // lingerT fired: the replies may go
	LastUse       time.Time
	Refusals      int // posts refused in a row (hostile.go)

	// Test seams, nil outside tests. Each runs under mu: testOnWake at
	// the start of a wake, before the batcher marks itself awake;
	// testOnSleep as a pass that found nothing more marks it asleep.
	TestOnWake, TestOnSleep func()

	Bufs bufPool // idle batch buffers (bufpool.go)
	// Arenas and queue arrays of ended slots, for the next slots: a
	// stream of a few dozen tokens would otherwise grow both from nothing.
	// Guarded by mu.
	freeArenas [][]byte
	freeQueues [][][]byte

	Wake   chan struct{} // cap 1
	wakeBy atomic.Uint32 // a bit per source signalled since the last wake (wake.go)
	// rerunSrc is the source of the pass that found the lane taken
	// (rerun): the wake that runs it again counts as that source. Guarded
	// by mu.
	rerunSrc metrics.MuxWakeSource
	lastWake metrics.MuxWakeSource // the source of the running pass; the goroutine's own
	Done     chan struct{}         // closed when the goroutine returns
}

// OutSlot is one stream of this node on the batcher: the sender's side of
// a slot. It is guarded by the batcher's lock.
type OutSlot struct {
	B        *Batcher
	Handle   wire.AnchorHandle
	ID       muxwire.SlotID
	anchorID uint64
	Session  uint64 // the routing session the owner answered with

	Q      [][]byte // records not yet written: the inlet and the withheld queue
	Arena  []byte   // where pushBytes encodes records; reset once q is empty
	spare  []byte   // the arena before it, reused once no queued record is in it
	qBytes int
	Credit uint32 // data credit the consumer granted and this side has not spent
	window uint32 // the credit it opened with: no grant lifts credit above it
	Seq    uint32 // next frame_seq
	// Flushable is how many records at the head of q a FlushBatch
	// released under FlushManual: they go as credit allows, and what was
	// queued after the call waits for the next one.
	Flushable int
	InReady   bool
	active    bool   // a record was queued since the last heartbeat
	openSeq   uint32 // the frame_seq of its OpenSlot
	openErr   error  // why its OpenSlot was not written
	openDone  bool   // its OpenSlot was posted or dropped: openErr says how

	// A pipelined attach (pending.go) opens the slot before the
	// owner answers: pending holds its records back until the answer,
	// answered says it came (Answered), and failErr is why the owner
	// refused. answeredCh is made only for a wait that begins before the
	// answer, and closed with it: the answer most often comes first, and a
	// channel per pipelined attach was an allocation per stream.
	pending     bool
	pipelined   bool
	answered    bool
	pendingWalk uint64 // the mux's walk count when the attach was sent
	Call        uint64 // the attach request's token (msgrx.AsyncCall.Token), abandoned when it expires
	answeredCh  chan struct{}
	failErr     error

	Life      StreamLife // ended by the application, gone (stream_life.go)
	cancelled bool
	stopped   bool
	stopCh    chan struct{} // closed by a consumer's stop only
	cancelCh  chan struct{} // closed by a cancel or a loss
	doneCh    chan struct{} // closed by the first of the two
	why       error         // the first signal's cause (Sender.Context)
	onFire    []func(error) // Sender.Context's cancel, run by the first signal
	SpaceWait chan struct{}
	retire.Settlement
}

func newBatcher(mx *Mux, peer ext.WorkerID, lane int) *Batcher {
	b := &Batcher{
		Mx: mx, peer: peer, Lane: lane, Budget: mx.budgetFor(peer),
		Epoch:         mx.Epochs.Add(1),
		FlyingCloses:  make(map[muxwire.SlotID]muxwire.CloseReason),
		flyingSignals: make(map[muxwire.SlotID]lifecycleSignal),
		Closes:        make(map[muxwire.SlotID]muxwire.CloseReason),
		rejected:      make(map[muxwire.SlotID]struct{}),
		signals:       make(map[muxwire.SlotID]lifecycleSignal),
		Wake:          make(chan struct{}, 1),
		Done:          make(chan struct{}),
		lingerT:       time.NewTimer(time.Hour),
	}
	b.lingerT.Stop()
	b.LastUse = time.Now()
	go b.run()
	return b
}

// Open allocates a slot for a stream the owner bound as (anchorID,
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
func (b *Batcher) Open(anchorID, session uint64, credit uint32) (*OutSlot, error) {
	return b.open(anchorID, session, credit, b.Mx.Cfg.AsyncOpenAck)
}

// OpenQueued is Open that returns once the OpenSlot is queued, as under
// AsyncOpenAck: the batcher's next pass, which the call wakes, writes it
// ahead of the slot's first records, usually in the same batch. It is
// the open from a ticket (OpenAnchorStream), whose stream's first batch
// carries its OpenSlot: the owner's bind already waits, so there is no
// accept window for a post of its own to measure, and that post was a
// write per stream (in the response plane, 9 of 10 of an engine's
// batches at no pass delay, a third at 1 ms). A refusal of the post is
// epoch death, and the stream's sends fail.
func (b *Batcher) OpenQueued(anchorID, session uint64, credit uint32) (*OutSlot, error) {
	return b.open(anchorID, session, credit, true)
}

func (b *Batcher) open(anchorID, session uint64, credit uint32, queued bool) (*OutSlot, error) {
	b.Mu.Lock()
	if !b.State.MayWrite() {
		b.Mu.Unlock()
		return nil, streamerr.ErrCancelled
	}
	idx, ok := b.allocLocked()
	if !ok {
		b.Mu.Unlock()
		return nil, errSlotsExhausted
	}
	id, _ := muxwire.NewSlotID(idx, b.gens[idx])
	credit += testCreditSkew // zero but in the simulation's mutation test
	s := &OutSlot{B: b, ID: id, anchorID: anchorID, Session: session, Credit: credit, window: credit, Q: b.queueLocked()}
	b.slots[idx] = s
	b.live++
	b.LastUse = time.Now()
	s.openSeq = s.Seq
	s.Seq++
	b.Opens = append(b.Opens, s)
	if queued {
		b.Mu.Unlock()
		b.Signal(metrics.WakeOpen) // the batcher writes queued OpenSlots before any data
		return s, nil
	}
	own := b.OwnLocked()
	if !own {
		b.OpenWaiters++ // the owner posts it before it lets go
	}
	b.Mu.Unlock()
	var err error
	if own {
		b.postOpens()
		b.Release()
		err = b.AwaitOpen(s) // posted by now: no wait
	} else {
		b.Signal(metrics.WakeOpen)
		err = b.AwaitOpen(s)
		b.Mu.Lock()
		b.OpenWaiters--
		b.Mu.Unlock()
	}
	if err != nil {
		return nil, err
	}
	return s, nil
}

// postOpens writes every queued OpenSlot in one batch and records the
// result on each slot. The caller owns the lane's writes.
func (b *Batcher) postOpens() {
	b.Mu.Lock()
	opens := b.Opens
	if len(opens) == 0 {
		b.Mu.Unlock()
		return // an earlier pass wrote ours
	}
	// The next attaches queue into the spare array, and this pass's comes
	// back as the spare when it is done: a zero-RTT open per stream so
	// queues without allocating.
	all := opens
	b.Opens, b.spareOpens = b.spareOpens, nil
	live := opens[:0] // filtered in place: the array is this pass's alone now
	for _, s := range opens {
		if s.Life.Closed() { // an epoch death came first: its peer never hears of it
			s.openErr, s.openDone = streamerr.ErrCancelled, true
		} else {
			live = append(live, s)
		}
	}
	opens = live
	b.openPostedLocked()
	b.Mu.Unlock()
	if len(opens) == 0 {
		return
	}
	err := b.postOpenSlots(opens)
	gone := errors.Is(err, errNoLongerWrites)
	switch {
	case gone:
		// Taken out of the mux: nothing was written, and no epoch died.
		// The attaches open on the lane's current batcher.
		err = streamerr.ErrCancelled
	case err != nil:
		b.postRefused(err) // epoch death: ends the slots just opened too
	}
	b.Mu.Lock()
	for _, s := range opens {
		if gone {
			s.endLocked(streamerr.ErrCancelled)
		}
	}
	b.openedLocked(opens, err)
	clear(all)
	if b.spareOpens == nil && cap(all) <= maxSpareOpens {
		b.spareOpens = all[:0]
	}
	b.Mu.Unlock()
}

// maxSpareOpens bounds the array of opens a batcher keeps for the next.
const maxSpareOpens = 64

// allocLocked takes a free index (the last freed first) or a new one.
func (b *Batcher) allocLocked() (uint32, bool) {
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
func (b *Batcher) releaseLocked(s *OutSlot) {
	idx := s.ID.Index()
	if b.slots[idx] != s {
		return
	}
	b.slots[idx] = nil
	b.gens[idx]++
	b.free = append(b.free, idx)
	b.live--
	b.LastUse = time.Now()
}

// testCreditSkew widens every slot's credit window past what the owner
// granted: a deliberate break of the credit rule, for the simulation
// harness's mutation test (sim_broken_test.go), which shows that the
// harness catches it. It is zero everywhere else; reading it costs one
// load per slot opened, nothing per record.
var testCreditSkew uint32

// MaxMuxRecord is the largest record the mux carries inline: one that
// goes alone in a batch of the messenger's largest frame. A larger record
// is refused with ItemTooLargeError; one above the messenger's staging
// threshold and below this goes alone in its batch, which the messenger
// stages by rendezvous.
const MaxMuxRecord = wire.MaxTCPFrame - 1024
