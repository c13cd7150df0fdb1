package messenger

import (
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/velo-go/velo/ext"
	"github.com/velo-go/velo/internal/testwait"
)

// notifyingReader is a reader's offer that tells of hand-ons
// (ext.HandoffNotifier), as streamsock's does: the test plays the
// transport, calling the listener when "its watchdog" hands on.
type notifyingReader struct {
	mu      sync.Mutex
	l       ext.HandOnListener
	handoff atomic.Int64 // runs offered
	now     atomic.Int64 // HandOnNow calls
}

func (h *notifyingReader) Handoff() bool { return h.HandoffNotify(nil) }
func (h *notifyingReader) HandoffNotify(l ext.HandOnListener) bool {
	h.mu.Lock()
	h.l = l
	h.mu.Unlock()
	h.handoff.Add(1)
	return true
}

// HandOnNow hands on at once, as the watchdog's handOn does, listener
// included.
func (h *notifyingReader) HandOnNow() {
	h.now.Add(1)
	h.handedOn()
}

// handedOn is the transport handing the connection on: the listener of
// the run hears of it, once.
func (h *notifyingReader) handedOn() {
	h.mu.Lock()
	l := h.l
	h.l = nil
	h.mu.Unlock()
	if l != nil {
		l.HandedOn()
	}
}

// oneWayRead hands n one-way messages to r as one read of a reader that
// offers h, and ends the read (finish).
func oneWayRead(t *testing.T, st *ext.ShutdownState, r *registered, h ext.Handoff, n int, first func(*job)) {
	b := spawnBatch{h: h}
	for i := range n {
		j := fireJob(t, st)
		if i == 0 && first != nil {
			first(&j)
		}
		b.dispatch(r, &j)
	}
	b.finish()
}

// TestOneWayReadRunsOnItsReader: a read of one-way messages, several
// segments' worth, to a spawn pool with nothing to do runs on the reader
// that read it, in order, with no worker woken (spawnPool.claim,
// runClaimed): a pipelined sender's messages each cost a quarter more when
// handed to a worker. Before, a read of more than one request always went
// to a worker. A reader that cannot tell of a hand-on (no
// ext.HandoffNotifier) still hands them to a worker.
func TestOneWayReadRunsOnItsReader(t *testing.T) {
	const n = 3*segJobs + 5
	m, st := poolNode(t, DefaultMaxRunningHandlers)
	var order []int
	var runs []int64
	r := m.newRegistered(FireHandler("stream", func(c *Context) {
		order = append(order, len(c.Payload))
		runs = append(runs, m.runs.Load())
	}), false)
	for round := range 2 {
		order, runs = order[:0], runs[:0]
		h := &notifyingReader{}
		b := spawnBatch{h: h}
		for i := range n {
			j := fireJob(t, st)
			j.payload = make([]byte, i)
			b.dispatch(r, &j)
		}
		b.finish()
		// Run on this goroutine: all of them are done when finish returns.
		if len(order) != n {
			t.Fatalf("round %d: %d of %d messages ran by the end of the read", round, len(order), n)
		}
		for i, got := range order {
			if got != i {
				t.Fatalf("round %d: message %d ran as the %dth", round, got, i)
			}
			// The run counts as one running handler, the whole read long.
			if runs[i] != 1 {
				t.Fatalf("round %d: the node counted %d running handlers during message %d, want 1", round, runs[i], i)
			}
		}
		if h.handoff.Load() != 1 {
			t.Fatalf("round %d: %d hand-off offers taken, want 1 for the read", round, h.handoff.Load())
		}
	}
	inline, wakes := m.spawnCounts(r)
	if inline != 2*n || wakes != 0 {
		t.Fatalf("%d of %d messages ran on the reader, %d workers woken; want all and none", inline, 2*n, wakes)
	}
	if !r.pool.idleForTest() || m.onReaders.Load() != 0 || m.runs.Load() != 0 {
		t.Fatalf("after the runs: pool idle %v, onReaders %d, runs %d", r.pool.idleForTest(), m.onReaders.Load(), m.runs.Load())
	}
	// Without a listener for hand-ons, a worker runs them.
	var ran atomic.Int64
	w := m.newRegistered(FireHandler("plain", func(*Context) { ran.Add(1) }), false)
	oneWayRead(t, st, w, &handOnRecorder{}, n, nil)
	drained(t, st, "the worker's read")
	if inline, wakes := m.spawnCounts(w); inline != 0 || wakes == 0 || ran.Load() != n {
		t.Fatalf("without HandoffNotify: %d ran, %d on the reader, %d wakes; want %d, 0, some", ran.Load(), inline, wakes, n)
	}
}

// TestOneWayReadOnReaderHandsOnBehindABlockedHandler: the first message of
// a read run on its reader blocks until every other one has run. When the
// transport hands the reader's connection on (its bound passed; here the
// test does it), the pool hears of it and wakes a worker for the rest
// (poolHandOn); the reader takes no more once its handler returns. A pool
// that left the read's messages to the blocked reader would wait here for
// ever.
func TestOneWayReadOnReaderHandsOnBehindABlockedHandler(t *testing.T) {
	const n = 2 * segJobs
	m, st := poolNode(t, DefaultMaxRunningHandlers)
	var others atomic.Int64
	entered, allRan := make(chan struct{}), make(chan struct{})
	r := m.newRegistered(FireHandler("read", func(c *Context) {
		if c.Payload != nil {
			close(entered)
			<-allRan
			return
		}
		if others.Add(1) == n-1 {
			close(allRan)
		}
	}), false)
	h := &notifyingReader{}
	done := make(chan struct{})
	go func() {
		defer close(done)
		oneWayRead(t, st, r, h, n, func(j *job) { j.payload = []byte("block") })
	}()
	<-entered
	if others.Load() != 0 {
		t.Fatalf("%d messages ran before the first one: not in order on the reader", others.Load())
	}
	h.handedOn()
	select {
	case <-allRan:
	case <-time.After(10 * time.Second):
		t.Fatalf("%d of %d messages ran while the first one's handler blocked its reader", others.Load(), n-1)
	}
	<-done
	drained(t, st, "the read")
	if inline, _ := m.spawnCounts(r); inline != 1 {
		t.Fatalf("%d messages ran on the reader, want 1 (the blocked one: the rest went to a worker)", inline)
	}
}

// TestOneWayReadOnReaderGoexitGivesBack: a handler that calls
// runtime.Goexit while its reader runs a read's messages ends the reader's
// goroutine. The connection is handed on (HandOnNow), the messages behind
// it get a worker, and the pool and the node get back what the run held.
func TestOneWayReadOnReaderGoexitGivesBack(t *testing.T) {
	const n = 10
	m, st := poolNode(t, 1)
	var calls atomic.Int32
	allRan := make(chan struct{})
	r := m.newRegistered(FireHandler("exits", func(*Context) {
		switch calls.Add(1) {
		case 1:
			runtime.Goexit()
		case n:
			close(allRan)
		}
	}), false)
	h := &notifyingReader{}
	returned := make(chan bool, 1)
	go func() {
		ok := false
		defer func() { returned <- ok }()
		oneWayRead(t, st, r, h, n, nil)
		ok = true
	}()
	if <-returned {
		t.Fatal("the read returned: the handler's Goexit did not end the goroutine")
	}
	select {
	case <-allRan:
	case <-time.After(10 * time.Second):
		t.Fatalf("%d of %d messages ran after a handler's Goexit on the reader", calls.Load(), n)
	}
	drained(t, st, "after a handler's Goexit")
	if h.now.Load() != 1 {
		t.Errorf("the reader was asked to hand on %d times, want 1", h.now.Load())
	}
	if n := m.onReaders.Load(); n != 0 {
		t.Errorf("onReaders %d after the run, want 0", n)
	}
	testwait.Until(t, "the pool to be idle and no run counted", func() bool { return r.pool.idleForTest() && m.runs.Load() == 0 })
	r.pool.mu.Lock()
	stale := r.pool.onReader != nil || r.pool.readerRun || r.pool.handedOn
	r.pool.mu.Unlock()
	if stale {
		t.Errorf("the pool keeps the gone reader's run")
	}
}

func (m *Messenger) spawnCounts(r *registered) (inline int64, wakes int) {
	r.pool.mu.Lock()
	defer r.pool.mu.Unlock()
	return r.pool.inline.Load(), r.pool.handoffs
}

func (p *spawnPool) idleForTest() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.q.n == 0 && p.running == 0 && p.searching == 0 && !p.readerRun
}

// TestSlowOneWayRunLeavesBusyPoolsToWorkers: a run on the reader that is
// handed on while its handlers take long (more than slowRunPerJob each)
// makes later reads claim the pool only when it is idle: a reader that
// took the queue over from workers running slow handlers side by side
// would run them one at a time until each run is handed on. A run that is
// not handed on lets reads take a busy pool over again.
func TestSlowOneWayRunLeavesBusyPoolsToWorkers(t *testing.T) {
	const n = 8
	m, st := poolNode(t, DefaultMaxRunningHandlers)
	var ran atomic.Int64
	entered, release, hold := make(chan struct{}, 1), make(chan struct{}), make(chan struct{})
	r := m.newRegistered(FireHandler("slow", func(c *Context) {
		switch string(c.Payload) {
		case "slow":
			entered <- struct{}{}
			<-release
			// Slow for sure, whatever the scheduler did: the run's time
			// per message is well over slowRunPerJob.
			for t0 := time.Now(); time.Since(t0) < 10*slowRunPerJob; {
			}
		case "hold":
			entered <- struct{}{}
			<-hold
		}
		ran.Add(1)
	}), false)
	// A run on the reader whose first handler is slow, handed on.
	h := &notifyingReader{}
	done := make(chan struct{})
	go func() {
		defer close(done)
		oneWayRead(t, st, r, h, n, func(j *job) { j.payload = []byte("slow") })
	}()
	<-entered
	h.handedOn()
	close(release)
	<-done
	testwait.Until(t, "the read to run", func() bool { return ran.Load() == n })
	r.pool.mu.Lock()
	slow := r.pool.slowRun
	r.pool.mu.Unlock()
	if !slow {
		t.Fatal("a run handed on in a slow handler is not taken for one of slow handlers")
	}
	// A worker runs a handler that blocks; a read now leaves the pool to
	// its workers.
	r.pool.submit(r, func() job { j := fireJob(t, st); j.payload = []byte("hold"); return j }())
	<-entered
	before, _ := m.spawnCounts(r)
	oneWayRead(t, st, r, &notifyingReader{}, n, nil)
	testwait.Until(t, "the second read to run", func() bool { return ran.Load() == 2*n })
	if after, _ := m.spawnCounts(r); after != before {
		t.Fatalf("%d messages of a read ran on the reader while a worker ran a slow handler, want 0", after-before)
	}
	close(hold)
	drained(t, st, "the reads")
}

// TestClaimedRunKeepsOtherReadersToTheBound: while a reader runs a pool's
// queue itself (runClaimed) and its handler blocks, another reader that
// takes that queue over its bound has the run's connection handed on, so
// that a worker takes the queue, and waits for that worker, as for any
// searching worker. Before, the pool had no searching worker during the
// run (the reader stopped counting as one at its first message, and
// workers are not woken for a claimed pool), so the other reader never
// waited: its reads piled up without bound behind the blocked handler
// until the transport's bound passed, up to its timer's lateness.
func TestClaimedRunKeepsOtherReadersToTheBound(t *testing.T) {
	const limit, reads = 8, 4
	m, st := poolNode(t, DefaultMaxRunningHandlers)
	m.spawnQueue = queueLimits{requests: limit}
	var ran atomic.Int64
	entered, release := make(chan struct{}), make(chan struct{})
	r := m.newRegistered(FireHandler("sink", func(c *Context) {
		if c.Payload != nil {
			close(entered)
			<-release
		}
		ran.Add(1)
	}), false)
	h := &notifyingReader{}
	claimed := make(chan struct{})
	go func() {
		defer close(claimed)
		oneWayRead(t, st, r, h, 2, func(j *job) { j.payload = []byte("block") })
	}()
	<-entered // the claimed run is in its first handler, not handed on
	finishes(t, "the other reader's reads", func() {
		for range reads {
			readInto(t, r, 2*limit, func() job { return fireJob(t, st) })
		}
	})
	r.pool.mu.Lock()
	maxQ := r.pool.maxQueued
	r.pool.mu.Unlock()
	if maxQ > limit+2*limit {
		t.Fatalf("the queue held %d, more than its bound %d and one read of %d", maxQ, limit, 2*limit)
	}
	if n := h.now.Load(); n != 1 {
		t.Fatalf("the blocked run was asked to hand on %d times, want 1", n)
	}
	close(release)
	<-claimed
	drained(t, st, "the reads")
	if n := ran.Load(); n != 2+reads*2*limit {
		t.Fatalf("%d ran, want %d", n, 2+reads*2*limit)
	}
}

// TestClaimedReadsKeepTheQueueBound: a read claims a pool only while its
// queue is under the bound. Each run on a reader that is handed on (here
// at its eighth message, as the transport's bound would, with short
// handlers, so not a slow run) leaves the rest of the queue to a worker;
// a read that claimed the pool again at once queued its whole read with
// no wait, and the workers leave a claimed queue alone: a sender faster
// than one goroutine grew the queue by a read less a run's worth each
// time, without bound. GOMAXPROCS(1) keeps the woken workers behind the
// reads, as a busy receiver does.
func TestClaimedReadsKeepTheQueueBound(t *testing.T) {
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(1))
	const limit, perRead, reads, perRun = 8, 64, 20, 8
	m, st := poolNode(t, DefaultMaxRunningHandlers)
	m.spawnQueue = queueLimits{requests: limit}
	var ran atomic.Int64
	var cur atomic.Pointer[notifyingReader]
	r := m.newRegistered(FireHandler("sink", func(*Context) {
		if ran.Add(1)%perRun == 0 {
			cur.Load().handedOn() // the bound passed during this handler
		}
	}), false)
	for range reads {
		h := &notifyingReader{}
		cur.Store(h)
		oneWayRead(t, st, r, h, perRead, nil)
	}
	drained(t, st, "the reads")
	if n := ran.Load(); n != reads*perRead {
		t.Fatalf("%d ran, want %d", n, reads*perRead)
	}
	r.pool.mu.Lock()
	maxQ := r.pool.maxQueued
	r.pool.mu.Unlock()
	if maxQ > limit+2*perRead {
		t.Fatalf("the queue held %d, more than its bound %d and two reads of %d", maxQ, limit, perRead)
	}
}
