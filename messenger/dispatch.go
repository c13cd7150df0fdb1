package messenger

import (
	"sync"
	"sync/atomic"
	"time"

	"go.opentelemetry.io/otel/trace"

	"github.com/velo-go/velo/ext"
	"github.com/velo-go/velo/internal/msgerr"
	"github.com/velo-go/velo/internal/msgwire"
	"github.com/velo-go/velo/internal/tracing"
)

// Dispatch never waits for a handler on the reader goroutine. The reader that delivered
// a request also reads the replies that its connection carries, so a
// reader held up by a busy handler stalls every call that waits for one of
// those replies: a handler that calls back the peer that sent it work would
// wait for ever. Every mode therefore queues (ordered lanes, a spawn pool
// under WithMaxConcurrent) or refuses at once (ErrLaneFull, ErrOverloaded);
// only WithInline runs on the reader, by its own contract, and spawn mode
// where the transport hands the connection on if the run lasts (tryInline
// for a lone request, runClaimed for a read of one-way messages). The one wait is
// after a read, for a spawn queue over its bound, and only while a worker
// that runs no handler is on its way to take from it (backpressure.go).

// job is one admitted request on its way to its handler. It holds only
// what the dispatch and the handler use of the inbound message (not its
// type, its raw header nor its urgency): a job is copied into a queue
// segment and out again, so its size is paid per request (160 bytes
// against the 216 of the message and the parsed header side by side).
type job struct {
	payload []byte
	owner   ext.Owner // the read buffer that payload and hdr alias; nil: none
	guard   ext.InFlightGuard
	conn    ext.ConnID
	hdr     requestHeader
	dl      time.Time     // the caller's deadline, read on arrival; zero without one (budget.go)
	at      time.Duration // when it was queued on an ordered lane, as monoNow has it (metrics only)
}

// done releases the request's in-flight guard and its read buffer, as
// ext.InboundMessage.Done does.
func (j *job) done() {
	j.guard.Release()
	if j.owner != nil {
		j.owner.Release()
	}
}

// len is the request's size on the wire less the frame's preamble, as
// ext.Frame.Len has it.
func (j *job) len() int { return j.hdr.len() + len(j.payload) }

// monoEpoch and monoNow give the time on the monotonic clock as one word:
// a job's queueing time is only ever subtracted from a later one.
var monoEpoch = time.Now()

func monoNow() time.Duration { return time.Since(monoEpoch) }

// registered is a handler as the messenger runs it.
type registered struct {
	Handler
	m      *Messenger
	system bool          // a '_' handler of velo's own: never refused for overload
	sem    chan struct{} // MaxConcurrent permits of ordered lanes; nil when unbounded

	lanesMu  sync.Mutex
	lanes    map[ext.WorkerID]*orderedLane
	overWarn logLimiter // the log line of a lane over its soft depth

	pool spawnPool // workers of spawn mode

	met *handlerMetrics // nil without metrics
}

func (m *Messenger) newRegistered(h Handler, system bool) *registered {
	r := &registered{Handler: h, m: m, system: system, lanes: map[ext.WorkerID]*orderedLane{}}
	if h.opts.maxConcurrent > 0 && h.opts.mode != modeSpawn {
		r.sem = make(chan struct{}, h.opts.maxConcurrent)
	}
	r.pool.max = h.opts.maxConcurrent
	r.met = m.handlerMetricsFor(h.name, system)
	return r
}

// dispatch hands a request to its handler in the handler's mode. It runs on
// the transport's reader goroutine and never waits (except for an inline
// handler, which runs right here).
func (r *registered) dispatch(j job) {
	switch r.opts.mode {
	case modeSpawn:
		if !r.system && r.m.overCap() {
			r.m.refuseOverloaded(j, r.name)
			return
		}
		r.pool.submit(r, j)
	case modeInline:
		select {
		case <-r.m.done: // teardown refuses what is left, as the other modes do
			r.m.reply(j.hdr, r.name, nil, ErrShuttingDown)
			j.done()
		default:
			r.run(&j, false, nil) // the reader goroutine runs it: no hand-off
		}
	default:
		if !r.system && r.m.overCap() {
			r.m.refuseOverloaded(j, r.name)
			return
		}
		key := j.hdr.id.Worker()
		if r.opts.mode == modeOrderedGlobal {
			key = 0
		}
		r.lane(key).push(j)
	}
}

// spawnBatch gathers a reader's consecutive requests to one spawn-mode
// handler into a segment, which the handler's pool takes with one lock:
// a read of many small requests is one hand-off, not one per request.
// Requests of other modes go on at once, after what was gathered.
type spawnBatch struct {
	r       *registered
	seg     *jobSeg
	flushed bool // a segment went to a pool already
	// greeted is the sender last found greeted in this read (when
	// isGreeted): a read's requests mostly come from one sender, and the
	// greeted set's lookup (a sync.Map, its key boxed and hashed) was a
	// fiftieth of the cost of a small message. The set only loses a
	// worker when the peer table evicts it, so a read that saw it greeted
	// may go on as if all of its requests came a moment earlier.
	greeted   ext.WorkerID
	isGreeted bool
	// h is what the transport's reader offers with the batch (finish):
	// asked, when a queue goes over its bound, whether the reader makes
	// the wait itself (ext.WaitDeferrer, noteOver).
	h ext.Handoff
	// over is a handler whose queue this batch took over its bound, when
	// the transport leaves the wait to the sink: the reader waits for it
	// once the batch is handed on (finish).
	over *registered
	// held are full segments of one-way messages to r that the reader
	// keeps back until the end of its read, in order, linked by next,
	// when it may run them itself (hold): a pool still busy with the
	// read before is mostly idle by then, and can be claimed.
	held, heldTail *jobSeg
	// claimed is the handler whose pool this reader claimed for a run of
	// its one-way messages (spawnPool.claim): the reader is that pool's
	// searching worker until it runs them at the end of the read
	// (runClaimed). twoWay: the segments gathered for r hold a request
	// that waits for an answer, so they are neither held nor claimed.
	claimed *registered
	twoWay  bool
}

// hold reports whether a full segment of the requests gathered for r may
// stay with the reader until the end of the read rather than go to r's
// pool at once: they are one-way messages, no pool is claimed yet, and the
// reader can be told that it lost its connection (ext.HandoffNotifier),
// so that it may run them itself.
func (b *spawnBatch) hold() bool {
	if b.twoWay || b.claimed != nil {
		return false
	}
	_, ok := b.h.(ext.HandoffNotifier)
	return ok
}

// greetedBy is m.greetedBy(w), looked up once per sender in a read.
func (b *spawnBatch) greetedBy(m *Messenger, w ext.WorkerID) bool {
	if b.isGreeted && b.greeted == w {
		return true
	}
	if !m.greetedBy(w) {
		return false
	}
	b.greeted, b.isGreeted = w, true
	return true
}

// slot is where the reader builds its next job: the free slot of the
// segment being gathered, where a request to the same handler as the one
// before it stays (dispatch), or scratch when there is none. A slot that
// dispatch does not keep is written over by the next job, and cleared
// with the segment (jobSeg.dirty).
func (b *spawnBatch) slot(scratch *job) *job {
	s := b.seg
	if s == nil || s.tail == segJobs {
		return scratch
	}
	s.dirty = max(s.dirty, s.tail+1)
	return &s.jobs[s.tail]
}

func (b *spawnBatch) dispatch(r *registered, j *job) {
	if s := b.seg; s != nil && s.tail < segJobs && j == &s.jobs[s.tail] {
		// Built in place (slot): kept where it is if it goes with the
		// segment's requests, else moved out first, as the segment may
		// go to its pool below.
		if b.r == r && (r.system || !r.m.overCap()) {
			s.bytes += j.len()
			s.tail++
			b.twoWay = b.twoWay || j.hdr.rtype != msgwire.FireAndForget
			return
		}
		moved := *j
		*j = job{}
		j = &moved
	}
	if r.opts.mode != modeSpawn {
		b.flush()
		r.dispatch(*j)
		return
	}
	if !r.system && r.m.overCap() {
		r.m.refuseOverloaded(*j, r.name)
		return
	}
	switch {
	case b.r == r && b.seg.tail == segJobs && b.hold():
		if b.held == nil {
			b.held = b.seg
		} else {
			b.heldTail.next = b.seg
		}
		b.heldTail, b.seg = b.seg, newSeg()
	case b.r != r || b.seg.tail == segJobs:
		b.flush()
		b.r, b.seg = r, newSeg()
	}
	b.seg.jobs[b.seg.tail] = *j
	b.seg.bytes += j.len()
	b.seg.tail++
	b.twoWay = b.twoWay || j.hdr.rtype != msgwire.FireAndForget
}

// flush hands what was gathered to its pool. A segment of one-way messages
// to a pool with nothing to do makes this reader the pool's searching
// worker (claim), when its transport can tell it that the reader lost its
// connection (ext.HandoffNotifier): it runs them itself at the end of the
// read (finish), rather than wake a worker for them.
func (b *spawnBatch) flush() {
	s, r := b.seg, b.r
	if s == nil {
		return
	}
	if b.held != nil {
		// The held segments go first, in order: s follows them.
		b.heldTail.next = s
		s = b.held
	}
	claim := b.hold()
	b.r, b.seg, b.held, b.heldTail, b.flushed, b.twoWay = nil, nil, nil, nil, true, false
	if claim && r.pool.claim(r, s) {
		b.claimed = r
		return
	}
	if r.pool.submitSegs(r, s) {
		b.noteOver(r)
	}
}

// noteOver is what a flush that took r's queue over its bound does: it
// hands the wait to the reader when it makes waits itself, at the end of
// its read (ext.WaitDeferrer), so that a frame of the same read behind the
// batch, an answer a running handler may wait on, is not held behind the
// wait. Otherwise the wait is the sink's, once the batch is handed on; a
// second handler over in the same batch makes the reader wait for the
// first one at once, so each queue keeps its bound.
func (b *spawnBatch) noteOver(r *registered) {
	if r == b.claimed {
		// This reader is the pool's searching worker: it takes the
		// queue down itself at the end of the read (runClaimed), and
		// would wait for itself.
		return
	}
	if d, ok := b.h.(ext.WaitDeferrer); ok {
		d.DeferWait((*drainWait)(r))
		return
	}
	if o := b.over; o != nil && o != r {
		o.pool.awaitDrain(o)
	}
	b.over = r
}

// finish ends a read's batch. When the read brought one spawn request and
// the reader offers its role (h), the request runs right here
// (spawnPool.tryInline): no worker is woken in front of it, and the
// transport hands the connection to another reader only if it runs long.
// Otherwise what was gathered goes to its pool, and when the batch took a
// queue over its bound the reader waits for the workers to take it down
// before it reads again (awaitDrain): here, or at the end of its read when
// the transport makes the wait itself (noteOver). A reader that offers no
// hand-off for this batch (Handoff false: frames of its read follow) costs
// a look at the pool here.
func (b *spawnBatch) finish() {
	h := b.h
	if s := b.seg; h != nil && !b.flushed && b.held == nil && s != nil && s.tail-s.head == 1 {
		if b.r.pool.tryInline(b.r, &s.jobs[s.head], h) {
			freeSeg(s)
			b.r, b.seg = nil, nil
			return
		}
	}
	b.flush()
	if r := b.claimed; r != nil {
		b.claimed = nil
		r.pool.runClaimed(r, b.h.(ext.HandoffNotifier))
	}
	if r := b.over; r != nil {
		b.over = nil
		r.pool.awaitDrain(r)
	}
}

// contextSlab gives a goroutine that runs many requests (a spawn worker)
// their Contexts out of blocks of slabContexts: one allocation per block
// rather than one per request, which was a twentieth of a small message's
// cost. A Context is never reused (a handler may leave it to a goroutine
// of its own), so a block stays alive while any of its Contexts does, with
// what those point to.
//
// Blocks of 64 (9 KiB, a size class whose spans hold six) cost a third
// less per Context than blocks of 16 (2.3 KiB, three to a span), 13 ns of
// a pipelined fire-and-forget message: the allocator's fixed work per
// block and span was much of it, the clearing of the memory the rest. A Context
// kept past its run keeps its whole block; payloads are let go (run).
type contextSlab []Context

const slabContexts = 64

func (s *contextSlab) next() *Context {
	if len(*s) == 0 {
		*s = make([]Context, slabContexts)
	}
	c := &(*s)[0]
	*s = (*s)[1:]
	return c
}

// run calls the handler, answers the caller and releases the request.
// A counted run (startRun) ends before the answer goes: a caller that
// sends its next request on the answer must find the place free. The
// Context comes from slab when there is one.
func (r *registered) run(j *job, counted bool, slab *contextSlab) {
	r.runBatched(j, counted, slab, nil, false)
}

// runBatched is run for a worker that releases the requests it ran in
// batches (rel); a nil rel releases each at once.
func (r *registered) runBatched(j *job, counted bool, slab *contextSlab, rel *doneBatch, inline bool) {
	var c *Context
	if slab != nil {
		c = slab.next()
	} else {
		c = new(Context)
	}
	c.Payload, c.Handler, c.m = j.payload, r.name, r.m
	c.headers, c.sender, c.rtype, c.conn = j.hdr.headers, j.hdr.id.Worker(), j.hdr.rtype, j.conn
	c.token, c.dl, c.inline = j.hdr.id.Hi, j.dl, inline
	var span trace.Span
	if r.m.tr != nil && !r.system {
		span = r.m.startServerSpan(c) // tracing.go
	}
	var start time.Time
	if r.met != nil {
		r.met.running().Inc()
		start = time.Now()
	}
	resp, err := r.call(c)
	if span != nil {
		tracing.End(span, err)
	}
	c.finishRun()
	// The Context may live on in its slab, which keeps every Context of
	// it until the last is done: the payload is the handler's only until
	// it returns, so it must not be kept with it. A staged payload (a
	// fresh buffer, 64 MiB say) kept by up to 63 spent Contexts grew
	// the heap by a GB in a run of staged calls, and every fetch then
	// wrote fresh memory: a page fault per 4 KiB.
	c.Payload = nil
	if j.hdr.fetched && !r.system {
		r.m.recycleFetched(j.payload, resp)
	}
	if counted {
		r.m.endRun(r)
	}
	if r.met != nil {
		r.met.observe(j.hdr.rtype, err, time.Since(start), len(j.payload), len(resp))
	}
	if err != nil && c.pastDeadline(err) {
		// The handler gave up at the caller's deadline, which the
		// caller's own timer keeps too: an answer could only replace the
		// caller's ErrRequestTimeout with a remote error of the same
		// meaning. (As a staged fetch that ran out of the budget does.)
		r.m.countFailure("dispatch", "handler_deadline")
		if c.lent != nil {
			c.lent.Release()
		}
		rel.done(j)
		return
	}
	if err != nil {
		// A handler's own error keeps its code (an *Error it returned, or
		// wrapped) but never the reason of one of the messenger's
		// sentinels (a downstream call that met ErrShuttingDown): that
		// would tell the caller that this node is shutting down.
		err = handlerError{err}
	}
	if c.lent != nil {
		r.m.replyLent(j.hdr, resp, err, c.lent)
		c.lent.Release() // the handler's reference: the transport holds its own
	} else if j.hdr.rtype != msgwire.FireAndForget { // nothing goes back: spare the header's copy
		r.m.replyOwned(j.hdr, resp, err, j.owner)
	}
	// The guard goes last: the drain waits until the reply is admitted.
	rel.done(j)
}

// doneBatch gathers the releases of the requests that one spawn worker ran
// back to back: their guards share the transport's shutdown state and
// their payloads mostly a read buffer, so a run of them is released with
// one atomic update of each (ext.DoneAll does the same for a batch)
// instead of two per request. A run is let go when the next request's
// guard or buffer differs, every maxDoneBatch requests, and before the
// worker parks or leaves: the drain never waits on a worker with nothing
// to run, and a read buffer goes back to its pool at the latest once the
// queue is empty. A worker that runs a long handler holds those of the
// requests before it meanwhile, which delays nothing: the drain waits for
// that handler anyway.
type doneBatch struct {
	guard  ext.InFlightGuard
	owner  ext.Owner
	n      int // requests gathered, all with guard
	owners int // of them, those with owner (the rest have none)
}

// maxDoneBatch bounds the requests a worker holds unreleased.
const maxDoneBatch = 64

// done releases j, or gathers it into the batch. A nil b releases at once.
func (b *doneBatch) done(j *job) {
	if b == nil {
		j.done()
		return
	}
	if b.n > 0 && (j.guard != b.guard || (j.owner != nil && b.owners > 0 && j.owner != b.owner) || b.n == maxDoneBatch) {
		b.flush()
	}
	b.guard = j.guard
	b.n++
	if j.owner != nil {
		b.owner = j.owner
		b.owners++
	}
}

// flush releases what was gathered.
func (b *doneBatch) flush() {
	if b.n == 0 {
		return
	}
	b.guard.ReleaseN(b.n)
	ext.ReleaseOwnerN(b.owner, b.owners)
	*b = doneBatch{}
}

// call runs the function; a panic becomes an error for the caller.
func (r *registered) call(c *Context) (resp []byte, err error) {
	returned := false
	defer func() {
		if p := recover(); p != nil {
			resp, err = nil, msgerr.Errorf(msgerr.Internal, "handler panicked: %v", p)
		} else if !returned {
			// runtime.Goexit: runBatched, which ends the context, does
			// not go on (the caller's deferred goexited does the rest).
			c.finishRun()
		}
	}()
	resp, err = r.fn(c)
	returned = true
	return resp, err
}

// refuse answers a request that will not run with err and releases it.
func (r *registered) refuse(j job, err error) {
	r.m.reply(j.hdr, r.name, nil, err)
	j.done()
}

// ---- the node's cap on running handlers ----
//
// m.runs counts the user handlers running now, in spawn and ordered mode. A
// request that arrives while it is at the cap (Config.MaxRunningHandlers)
// is refused with ErrOverloaded; one admitted below the cap may wait in a
// queue (a burst, an ordered lane) and runs later. Spawn workers are held
// to the cap too, so it bounds goroutines: a pool with requests queued that
// may not start a worker because the node is at its cap registers as
// starved, and the next handler to finish starts that worker. Velo's own
// system handlers are never counted, refused nor held back: they are short, and a
// peer needs them answered (the handshake, event triggers).

// overCap reports whether the node runs as many handlers as it allows.
func (m *Messenger) overCap() bool { return m.runs.Load() >= m.maxRuns }

// startRun counts a run of r's handler. A system handler's run is not
// counted: a node answering a peer's handshake must not refuse the user
// request that comes right behind it on the same connection.
func (m *Messenger) startRun(r *registered) {
	if !r.system {
		m.runs.Add(1)
	}
}

// endRun ends a run started with startRun and hands the freed place to a
// starved pool.
func (m *Messenger) endRun(r *registered) {
	if !r.system && m.runs.Add(-1) < m.maxRuns && m.nStarved.Load() > 0 {
		m.kickStarved()
	}
}

// addStarved registers r's pool as waiting for a place under the cap. The
// pool's lock is held (lock order: pool, then starvedMu). It reports
// whether the node is still at its cap: when it is not, a run ended while
// the pool registered (endRun may have looked before), so the caller
// starts its worker itself.
func (m *Messenger) addStarved(r *registered) bool {
	m.starvedMu.Lock()
	m.starved = append(m.starved, r)
	m.nStarved.Add(1)
	m.starvedMu.Unlock()
	return m.overCap()
}

// kickStarved lets starved pools start a worker, until one does or the
// node is at its cap again. An entry can be stale (the pool's own workers
// took its queue meanwhile); skipping it must not strand the next one.
func (m *Messenger) kickStarved() {
	for !m.overCap() {
		m.starvedMu.Lock()
		if len(m.starved) == 0 {
			m.starvedMu.Unlock()
			return
		}
		r := m.starved[0]
		m.starved[0] = nil
		m.starved = m.starved[1:]
		m.nStarved.Add(-1)
		m.starvedMu.Unlock()
		p := &r.pool
		p.mu.Lock()
		p.starved = false
		a := p.needWorkerLocked(r)
		p.mu.Unlock()
		if a != spawnNothing {
			p.act(r, a)
			return
		}
	}
}

// refuseOverloaded answers a request with ErrOverloaded at once.
func (m *Messenger) refuseOverloaded(j job, handler string) {
	m.countFailure("dispatch", "overloaded")
	if m.overloadWarn.allow() {
		m.logger().Warn("velo: node runs as many handlers as it allows; refusing requests with ErrOverloaded",
			"handler", handler, "max_running_handlers", m.maxRuns,
			"metric", `velo_messenger_dispatch_failures_total{reason="overloaded"}`)
	}
	m.reply(j.hdr, handler, nil, ErrOverloaded)
	j.done()
}

// logLimiter lets a log line through at most once per logEvery.
type logLimiter struct{ last atomic.Int64 }

const logEvery = 10 * time.Second

func (l *logLimiter) allow() bool {
	now := time.Now().UnixNano()
	last := l.last.Load()
	if last != 0 && now-last < int64(logEvery) {
		return false
	}
	return l.last.CompareAndSwap(last, now)
}

// ---- ordered lanes ----

// lane returns the live ordered lane for key, making one if needed.
func (r *registered) lane(key ext.WorkerID) *orderedLane {
	r.lanesMu.Lock()
	defer r.lanesMu.Unlock()
	if l, ok := r.lanes[key]; ok {
		return l
	}
	l := &orderedLane{r: r, key: key, notify: make(chan struct{}, 1)}
	r.lanes[key] = l
	if r.met != nil {
		ls := r.met.lane()
		ls.lanes.Inc()
		ls.created.Inc()
	}
	return l
}

// orderedLane runs one sender's requests (or everyone's, for a global lane)
// in arrival order, on one goroutine that lives while the lane has work and
// stops after the idle TTL. Its queue has no hard bound: the soft depth
// (OrderedConfig.MaxQueueDepth) either warns or refuses, and never makes
// the reader wait.
type orderedLane struct {
	r      *registered
	key    ext.WorkerID
	mu     sync.Mutex
	q      []job
	run    bool // the lane goroutine is alive
	parked bool // it waits on notify
	dead   bool // it stopped; the lane left the map
	notify chan struct{}
	last   atomic.Int64 // unix nanos of the last job finished
	// depth counts the requests queued and not yet started, including the
	// ones the loop took off q and has not reached: the soft depth is
	// measured against it. Raised under mu, lowered by the loop without it,
	// so push may read it a little high (refuse a shade early), never low.
	depth atomic.Int64
}

// laneTimerArms counts idle-timer arms, for a test that holds the cost.
var laneTimerArms atomic.Int64

// push queues a job, applying the overflow policy. It starts the lane's
// goroutine when none runs. It never waits.
func (l *orderedLane) push(j job) {
	r := l.r
	l.mu.Lock()
	if l.dead {
		l.mu.Unlock()
		select {
		case <-r.m.done:
			// stoppedChan at teardown: refuse rather than look for another lane.
			r.refuse(j, ErrShuttingDown)
		default:
			// Retired between lookup and push: a new lane takes it.
			r.lane(l.key).push(j)
		}
		return
	}
	if max := r.opts.maxDepth; max > 0 && l.depth.Load() >= int64(max) {
		if r.opts.overflow == Reject {
			l.mu.Unlock()
			r.m.countFailure("dispatch", "ordered_lane_shed")
			if r.overWarn.allow() {
				r.m.logger().Warn("velo: ordered lane at its max queue depth; refusing messages with ErrLaneFull",
					"handler", r.name, "max_queue_depth", max, "lane", uint64(l.key),
					"metric", `velo_messenger_dispatch_failures_total{reason="ordered_lane_shed"}`)
			}
			r.refuse(j, ErrLaneFull)
			return
		}
		// Warn: queue it anyway, count it, and say so now and then.
		if r.met != nil {
			r.met.lane().overDepth.Inc()
		}
		if r.overWarn.allow() {
			r.m.logger().Warn("velo: ordered lane over its max queue depth; the handler falls behind its sender",
				"handler", r.name, "max_queue_depth", max, "depth", l.depth.Load(), "lane", uint64(l.key),
				"metric", "velo_messenger_ordered_lane_over_depth_total")
		}
	}
	if r.met != nil {
		j.at = monoNow()
		r.met.lane().depth.Inc()
	}
	l.depth.Add(1)
	l.q = append(l.q, j)
	switch {
	case !l.run:
		l.run = true
		go l.loop()
	case l.parked:
		l.parked = false
		l.notify <- struct{}{}
	}
	l.mu.Unlock()
}

func (l *orderedLane) loop() {
	r := l.r
	ttl := r.opts.idleTTL
	var timer *time.Timer
	var expired <-chan time.Time
	if ttl > 0 {
		// One timer for the life of the lane, moved on only when it fires
		// early: never one per message.
		timer = time.NewTimer(ttl)
		laneTimerArms.Add(1)
		expired = timer.C
		defer timer.Stop()
	}
	done := r.m.done
	var batch []job
	for {
		l.mu.Lock()
		if len(l.q) == 0 {
			l.parked = true
			l.mu.Unlock()
			select {
			case <-l.notify:
				continue
			case <-done:
				l.stop()
				return
			case <-expired:
				idle := time.Duration(time.Now().UnixNano() - l.last.Load())
				if idle < ttl && l.last.Load() != 0 {
					timer.Reset(ttl - idle)
					laneTimerArms.Add(1)
					continue
				}
				if l.retire() {
					return
				}
				timer.Reset(ttl)
				laneTimerArms.Add(1)
				continue
			}
		}
		batch, l.q = l.q, batch[:0]
		l.mu.Unlock()
		for i := range batch {
			if !l.runOne(batch[i]) {
				// Teardown: what is still queued is refused, not run.
				l.refuse(batch[i:])
				l.stop()
				return
			}
			batch[i] = job{}
		}
		l.last.Store(time.Now().UnixNano())
	}
}

// runOne runs one request of the lane, with a MaxConcurrent permit when the
// handler has a limit. It reports false, running nothing, at teardown.
func (l *orderedLane) runOne(j job) bool {
	r := l.r
	select {
	case <-r.m.done:
		return false
	default:
	}
	if r.sem != nil {
		select {
		case r.sem <- struct{}{}:
			defer func() { <-r.sem }()
		case <-r.m.done:
			return false
		}
	}
	l.depth.Add(-1)
	if r.met != nil {
		ls := r.met.lane()
		ls.depth.Dec()
		ls.wait.Observe((monoNow() - j.at).Seconds())
	}
	r.m.startRun(r) // counted while it runs, never held back: the lane is one goroutine
	r.run(&j, true, nil)
	return true
}

// retire removes an idle lane. It reports false when work arrived meanwhile.
func (l *orderedLane) retire() bool {
	l.r.lanesMu.Lock()
	defer l.r.lanesMu.Unlock()
	l.mu.Lock()
	defer l.mu.Unlock()
	if len(l.q) > 0 {
		return false
	}
	// A wake-up left over from an earlier push may sit in notify; the lane
	// is empty, so drop it.
	select {
	case <-l.notify:
	default:
	}
	l.dead, l.run = true, false
	if l.r.lanes[l.key] == l {
		delete(l.r.lanes, l.key)
		if l.r.met != nil {
			l.r.met.lane().lanes.Dec()
		}
	}
	return true
}

// stop ends the lane at shutdown: queued requests are answered with
// ErrShuttingDown and released.
func (l *orderedLane) stop() {
	// Leave the map as retire does (lanesMu before l.mu), so no push finds
	// this lane again.
	l.r.lanesMu.Lock()
	l.mu.Lock()
	q := l.q
	l.q, l.dead = nil, true
	l.mu.Unlock()
	if l.r.lanes[l.key] == l {
		delete(l.r.lanes, l.key)
		if l.r.met != nil {
			l.r.met.lane().lanes.Dec()
		}
	}
	l.r.lanesMu.Unlock()
	l.refuse(q)
}

// refuse answers queued requests with ErrShuttingDown and releases them.
func (l *orderedLane) refuse(jobs []job) {
	for i := range jobs {
		l.depth.Add(-1)
		if l.r.met != nil {
			l.r.met.lane().depth.Dec()
		}
		l.r.refuse(jobs[i], ErrShuttingDown)
		jobs[i] = job{}
	}
}

// ---- spawn mode ----

// spawnPool runs spawn-mode requests on reusable goroutines.
//
// Spawn mode promises that a request never waits for another one's handler
// to return: a handler that blocks holds up nobody. The pool keeps that
// promise without a goroutine per request. The rule: while requests are
// queued, one worker is on its way to the queue and in no handler (it is
// "searching"). A worker that takes a request and leaves more behind makes
// sure the next searching worker exists (wakes a parked one or starts one)
// before it runs its own. So a queued request always has a free worker
// coming, while a burst of short requests is run by the few workers that
// come back for more, with one wake per worker rather than one per request.
//
// Under WithMaxConcurrent(n) at most n workers run the handler; requests
// beyond that wait in the queue, not on goroutines, and a worker that
// finishes takes the next one.
//
// A worker that finds nothing to do parks, up to maxParked of them; the
// others exit. No timers.
//
// The queue is bounded by making the reader that overfills it wait for
// the searching worker's progress, never for a handler (backpressure.go).
type spawnPool struct {
	mu        sync.Mutex
	q         jobQueue
	max       int           // MaxConcurrent; 0: unbounded
	running   int           // workers inside the handler
	searching int           // workers woken or started that have not taken a request yet (0 or 1)
	parked    int           // workers waiting on wake
	starved   bool          // in the node's starved list (see endRun)
	workers   int           // live workers, for tests
	handoffs  int           // workers woken or started, for tests
	inline    atomic.Int64  // requests run on a reader (tryInline, runClaimed), for tests
	onReader  ext.HandOnNow // the reader of the run tryInline or runClaimed makes, while it does
	// readerRun: a reader claimed the pool (claim) and is its searching
	// worker, or runs its queue (runClaimed); handedOn: that reader's
	// connection went to another goroutine meanwhile (poolHandOn), so a
	// worker takes the queue from it.
	readerRun, handedOn bool
	// slowRun: the last run on a reader was handed on (its handlers ran
	// long), so a reader claims the pool only when it is idle.
	slowRun bool
	wake    chan struct{}
	onPark  func() // test seam: runs as a worker parks
	// drained, when not nil, is closed to wake the readers waiting for the
	// queue to go down (backpressure.go).
	drained   chan struct{}
	pauses    int    // reader waits on drained, for tests
	maxQueued int    // the most requests queued at once, for tests
	onPause   func() // test seam: runs as a reader starts to wait
}

// maxParked bounds the idle workers one handler keeps.
const maxParked = 16

// spawnAction is what a pool operation asks its caller to do once it has
// let go of the lock.
type spawnAction uint8

const (
	spawnNothing spawnAction = iota
	spawnWake                // send a token on wake
	spawnStart               // start a worker
)

// submit queues a request.
func (p *spawnPool) submit(r *registered, j job) {
	p.mu.Lock()
	// Checked under the lock that the workers' teardown takes, so a request
	// queued at teardown is either run or refused, never stranded.
	select {
	case <-r.m.done:
		p.mu.Unlock()
		r.refuse(j, ErrShuttingDown)
		return
	default:
	}
	p.q.push(j)
	a := p.needWorkerLocked(r)
	p.mu.Unlock()
	p.act(r, a)
}

// submitSegs queues the requests of segments filled by the caller (s and
// the ones linked after it), under one lock. The pool owns the segments
// from now on. It reports whether the queue is now over its bound, so that
// the reader should wait for it (awaitDrain) once its read is handed on.
func (p *spawnPool) submitSegs(r *registered, s *jobSeg) bool {
	p.mu.Lock()
	select {
	case <-r.m.done:
		p.mu.Unlock()
		for s != nil {
			for i := s.head; i < s.tail; i++ {
				r.refuse(s.jobs[i], ErrShuttingDown)
				s.jobs[i] = job{}
			}
			next := s.next
			freeSeg(s)
			s = next
		}
		return false
	default:
	}
	p.q.pushSegs(s)
	a := p.needWorkerLocked(r)
	over := p.noteQueuedLocked(r)
	p.mu.Unlock()
	p.act(r, a)
	return over
}

// needWorkerLocked makes sure a searching worker exists while requests
// wait that a worker may take: under the handler's MaxConcurrent and the
// node's cap.
func (p *spawnPool) needWorkerLocked(r *registered) spawnAction {
	if p.searching > 0 || p.q.n == 0 || (p.max > 0 && p.running >= p.max) || p.readerTakes() {
		return spawnNothing
	}
	if !r.system && r.m.overCap() {
		if p.starved {
			return spawnNothing
		}
		p.starved = true
		if r.m.addStarved(r) {
			return spawnNothing
		}
	}
	p.searching++
	p.handoffs++
	if p.parked > 0 {
		p.parked--
		return spawnWake
	}
	p.workers++
	return spawnStart
}

func (p *spawnPool) act(r *registered, a spawnAction) {
	switch a {
	case spawnWake:
		p.wake <- struct{}{} // never full: one token per parked worker
	case spawnStart:
		go p.work(r)
	}
}

// work takes requests until none is left that it may run, then parks or
// exits. It starts as the searching worker.
func (p *spawnPool) work(r *registered) {
	searching, ran := true, false
	var slab contextSlab
	var j job // the request being run, copied out of its segment once
	var rel doneBatch
	// A handler that calls runtime.Goexit ends the worker in the middle of
	// runBatched: the deferred call, made once per worker, gives back what
	// the run holds (goexited).
	inRun := false
	defer func() {
		if inRun {
			rel.flush()
			p.goexited(r, &j, nil)
		}
	}()
	for {
		p.mu.Lock()
		if searching {
			p.searching--
			searching = false
		}
		if ran {
			p.running--
			ran = false
		}
		// Teardown sets stopped just before it closes done, so this sees
		// it as early as a look at done would; a load of a flag costs
		// less than a receive that may not block, once per request.
		if r.m.stopped.Load() {
			p.workers--
			left := p.q.takeAll()
			p.wakeDrainLocked(r, true)
			p.mu.Unlock()
			rel.flush()
			p.refuseAll(r, left)
			return
		}
		if p.q.n == 0 || (p.max > 0 && p.running >= p.max) || p.readerTakes() {
			p.wakeDrainLocked(r, true) // nothing this worker takes: no reader waits on it
			if p.parked >= maxParked {
				p.workers--
				p.mu.Unlock()
				rel.flush()
				return
			}
			if p.wake == nil {
				p.wake = make(chan struct{}, maxParked)
			}
			p.parked++
			p.mu.Unlock()
			rel.flush()
			j = job{} // a parked worker pins no request's memory
			if p.onPark != nil {
				p.onPark()
			}
			select {
			case <-p.wake:
				searching = true
				continue
			case <-r.m.done:
				p.mu.Lock()
				p.workers--
				left := p.q.takeAll()
				p.wakeDrainLocked(r, true)
				p.mu.Unlock()
				p.refuseAll(r, left)
				return
			}
		}
		p.q.popInto(&j)
		// More requests queued behind this one: this worker, or another
		// one it wakes, answers them right after, and mostly to the same
		// peer (a read's batch comes from one connection).
		j.hdr.follows = p.q.n > 0
		p.running++
		ran = true
		r.m.startRun(r)
		a := p.needWorkerLocked(r)
		p.wakeDrainLocked(r, false)
		p.mu.Unlock()
		p.act(r, a)
		inRun = true
		r.runBatched(&j, true, &slab, &rel, false)
		inRun = false
	}
}

// tryInline runs j on the calling reader goroutine, once h said it may
// (the transport then hands the connection on if j runs long), as one of
// the pool's workers would: counted in running and under the node's
// cap. It does nothing and
// reports false when the pool is busy (requests wait, or a worker runs or
// is on its way: under WithMaxConcurrent that also keeps the limit), or
// when the reader could not hand off; the caller then queues j.
func (p *spawnPool) tryInline(r *registered, j *job, h ext.Handoff) bool {
	p.mu.Lock()
	select {
	case <-r.m.done:
		p.mu.Unlock()
		r.refuse(*j, ErrShuttingDown)
		return true
	default:
	}
	if p.q.n > 0 || p.running > 0 || p.searching > 0 {
		// Busy: a worker is running, or coming, and takes the request
		// with those queued (a stream of one-way messages stays on it);
		// on a reader it would cost a hand-off each, not save one.
		p.mu.Unlock()
		return false
	}
	p.running++ // held while Handoff runs, so no worker takes the place
	// The run's Context hands the connection on at once if its handler
	// asks for its context.Context (Context.Context); running is held, so
	// this is the pool's only run on a reader.
	p.onReader, _ = h.(ext.HandOnNow)
	p.mu.Unlock()
	ok := h.Handoff()
	if ok {
		p.inline.Add(1)
		r.m.onReaders.Add(1)
		r.m.startRun(r)
		slab := slabs.Get().(*contextSlab)
		// A handler that calls runtime.Goexit (t.FailNow, say) ends this
		// goroutine, the reader's, in the middle of runBatched: the
		// deferred call gives back what the run holds (goexited). An
		// open-coded defer, a nanosecond or two on a run on a reader.
		ended := false
		defer func() {
			if !ended {
				p.goexited(r, j, h)
			}
		}()
		r.runBatched(j, true, slab, nil, true)
		ended = true
		slabs.Put(slab)
		r.m.onReaders.Add(-1)
	}
	p.mu.Lock()
	p.onReader = nil
	p.running--
	a := p.needWorkerLocked(r) // a request queued behind the place this run held
	p.mu.Unlock()
	p.act(r, a)
	return ok
}

// Runs of one-way messages on their reader.
//
// A stream of one-way messages to a spawn handler (a pipelined sender's)
// reaches the node as reads of tens to hundreds of them. Handed to a
// worker, each message cost the pool's lock twice more (the reader's
// submit and the worker's take contend for it from two cores), the move
// of its job and of the read buffer's lines to the worker's core, and the
// worker's own turn at the scheduler: about a quarter of a small
// message's cost on the receiving node. So a reader that gathered one-way
// messages for a pool with nothing to do claims the pool (claim): it
// queues them as usual but counts as the pool's searching worker, so no
// worker is woken, and once its read is handed on it takes the queue
// itself (runClaimed), as a worker would, under the transport's hand-off
// (ext.HandoffNotifier): the whole run, not each message, is one run on
// the reader. If the run outlasts the transport's bound, or a handler
// asks for its context.Context or makes a call (handOnReader,
// handOnReaders), or the node shuts down, the transport hands the
// connection to another goroutine and tells the pool (poolHandOn), which
// wakes a worker for what is left; the reader stops taking once its
// handler returns. So messages queued behind a handler that blocks wait,
// as the frames behind it on the connection do, for the transport's
// bound and its timer's lateness (streamsock's watchdog: 50 µs and, with
// both cores busy, up to some 20 ms), and no longer. A request that waits
// for an answer is never claimed for: it keeps the worker of spawn mode,
// or tryInline when it is alone in its read.

// claim queues s and the segments linked after it, one-way messages that
// the calling reader gathered, and makes the reader r's searching worker,
// if no other reader runs r's requests, the queue is under its bound, and
// either the pool is idle (nothing queued, no worker running or on its
// way) or it has no WithMaxConcurrent and its last run on a reader was not
// slow (slowRun): then its workers park once their handlers return
// (readerTakes) and leave the queue to the reader. It reports false,
// doing nothing, otherwise. The reader must end the claim with runClaimed
// once its read is handed on.
func (p *spawnPool) claim(r *registered, s *jobSeg) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	// A lone request running on a reader (tryInline) holds onReader, which
	// the claimed run would need for itself (handOnReader).
	// A queue over its bound is left to its workers, and the read to the
	// wait that keeps the bound (noteOver): a claim queues its read with
	// no wait, so claims one after the other, each run handed on before
	// it took down a read's worth, grew the queue without bound.
	if p.readerRun || p.onReader != nil || r.m.stopped.Load() || p.q.overLocked(r.m.spawnQueue) ||
		((p.max > 0 || p.slowRun) && (p.q.n > 0 || p.running > 0 || p.searching > 0)) {
		return false
	}
	p.q.pushSegs(s)
	p.noteQueuedLocked(r) // the high mark; no wait: this reader takes the queue down
	p.searching++
	p.readerRun, p.handedOn = true, false
	return true
}

// runClaimed runs the queue of a pool the calling reader claimed, on the
// reader, under h's hand-off, until the queue is empty, the connection is
// handed on (poolHandOn), the pool is at its WithMaxConcurrent, or the node
// stops. A worker is then woken for what is left, as needed.
func (p *spawnPool) runClaimed(r *registered, h ext.HandoffNotifier) {
	p.mu.Lock()
	p.onReader, _ = h.(ext.HandOnNow)
	p.mu.Unlock()
	if !h.HandoffNotify((*poolHandOn)(r)) {
		// The transport is closing: the reader must not block.
		p.mu.Lock()
		p.searching--
		p.readerRun, p.handedOn, p.onReader = false, false, nil
		a := p.needWorkerLocked(r)
		p.wakeDrainLocked(r, false)
		p.mu.Unlock()
		p.act(r, a)
		return
	}
	r.m.onReaders.Add(1)
	// The node counts the reader's run as one handler running from here
	// to its end, rather than each message's (two atomic updates of a
	// shared word a message): it runs one at a time. A request that waits
	// for an answer (another reader's, queued meanwhile) takes the count
	// over and ends it before its answer goes, as a worker's run does, so
	// that its caller's next request finds the place free (held: the
	// run's count is outstanding).
	r.m.startRun(r)
	held := true
	slab := slabs.Get().(*contextSlab)
	start, ran := monoNow(), 0
	var j job
	var rel doneBatch
	// As in work and tryInline: a handler that calls runtime.Goexit ends
	// the reader's goroutine in the middle of runBatched.
	inRun := false
	defer func() {
		if inRun {
			rel.flush()
			p.goexited(r, &j, h)
		}
	}()
	searching := true
	var left []job
	p.mu.Lock()
	for {
		if searching {
			p.searching--
			searching = false
		} else {
			p.running--
		}
		if p.handedOn || p.q.n == 0 || (p.max > 0 && p.running >= p.max) {
			break
		}
		if r.m.stopped.Load() {
			left = p.q.takeAll()
			break
		}
		p.q.popInto(&j)
		p.running++
		p.wakeDrainLocked(r, false)
		p.mu.Unlock()
		ran++
		twoWay := j.hdr.rtype != msgwire.FireAndForget
		switch {
		case twoWay && held:
			held = false
		case twoWay:
			r.m.startRun(r)
		case !held:
			r.m.startRun(r)
			held = true
		}
		inRun = true
		r.runBatched(&j, twoWay, slab, &rel, true)
		inRun = false
		p.mu.Lock()
	}
	// A run handed on because its handlers are slow (not because it ran
	// many short ones) makes the next reader wait for an idle pool: it
	// would stop the workers that run them side by side (readerTakes).
	// A run that ran nothing (a late hand-on, meant for the run before)
	// tells nothing.
	switch {
	case !p.handedOn:
		p.slowRun = false
	case ran > 0:
		p.slowRun = monoNow()-start > time.Duration(ran)*slowRunPerJob
	}
	p.readerRun, p.handedOn, p.onReader = false, false, nil
	a := p.needWorkerLocked(r)
	p.wakeDrainLocked(r, true)
	p.mu.Unlock()
	p.act(r, a)
	if held {
		r.m.endRun(r)
	}
	rel.flush()
	j = job{}
	slabs.Put(slab)
	r.m.onReaders.Add(-1)
	p.inline.Add(int64(ran))
	p.refuseAll(r, left)
}

// slowRunPerJob is the time per request above which a run on a reader that
// was handed on counts as one of slow handlers (spawnPool.slowRun).
const slowRunPerJob = 2 * time.Microsecond

// readerTakes reports whether a reader that claimed the pool takes its
// queue: workers leave it to that reader, and none is woken for it, until
// its connection is handed on.
func (p *spawnPool) readerTakes() bool { return p.readerRun && !p.handedOn }

// poolHandOn is r's pool as the listener of a run on a reader
// (runClaimed): a pointer conversion, so it costs no allocation.
type poolHandOn registered

// HandedOn wakes a worker for the requests still queued behind the run of
// a reader whose connection went to another goroutine. A late call, after
// the run ended, may end the pool's next run on a reader early: a worker
// woken that the reader would have spared.
func (l *poolHandOn) HandedOn() {
	r := (*registered)(l)
	p := &r.pool
	a := spawnNothing
	p.mu.Lock()
	if p.readerRun && !p.handedOn {
		p.handedOn = true
		a = p.needWorkerLocked(r)
		p.wakeDrainLocked(r, false)
	}
	p.mu.Unlock()
	p.act(r, a)
}

// errGoexit answers a request whose handler called runtime.Goexit.
var errGoexit = msgerr.Errorf(msgerr.Internal, "handler called runtime.Goexit")

// goexited gives back what a run of r's handler held when the handler
// called runtime.Goexit, which ends the run's goroutine (a worker, or the
// reader for h, tryInline) without a return to runBatched, tryInline or
// work: the node's running count and the pool's place, without which the
// node's cap and the pool's WithMaxConcurrent would lose one for good and
// the pool never run on a reader again; the request, answered with an
// error rather than left to the caller's deadline, and released (the
// drain waits for it); and for a run on a reader, the node's count of
// them (left up, every later call would look at every pool) and the
// connection, which a follower reads on at once. A worker that queued
// requests leave behind is replaced.
func (p *spawnPool) goexited(r *registered, j *job, h ext.Handoff) {
	if h != nil {
		r.m.onReaders.Add(-1)
		if n, ok := h.(ext.HandOnNow); ok {
			n.HandOnNow()
		}
	}
	r.m.endRun(r)
	if r.met != nil {
		r.met.running().Dec() // the in-flight gauge that runBatched raised
	}
	p.mu.Lock()
	p.running--
	if h != nil {
		p.onReader = nil
		p.readerRun, p.handedOn = false, false // runClaimed's, if it was one
	} else {
		p.workers--
	}
	a := p.needWorkerLocked(r)
	p.wakeDrainLocked(r, false)
	p.mu.Unlock()
	p.act(r, a)
	r.refuse(*j, errGoexit) // the guard last, as in runBatched: the drain waits for it
}

// handOnReader hands on the connection of the reader that runs r's
// request, if one does (tryInline) and can.
func (p *spawnPool) handOnReader() {
	p.mu.Lock()
	h := p.onReader
	p.mu.Unlock()
	if h != nil {
		h.HandOnNow()
	}
}

// slabs holds the Context blocks of requests run on readers (tryInline),
// which, unlike a worker, keep none of their own.
var slabs = sync.Pool{New: func() any { return new(contextSlab) }}

// refuseAll answers requests still queued at teardown with ErrShuttingDown:
// a worker leaving must not strand a request's guard.
func (p *spawnPool) refuseAll(r *registered, left []job) {
	for _, j := range left {
		r.refuse(j, ErrShuttingDown)
	}
}

// jobQueue is a FIFO of jobs in fixed-size segments. A reader fills a
// segment of its own without the pool's lock and links it in with one lock
// (submitBatch); growing never copies the jobs already queued, and spent
// segments go back to a pool.
type jobQueue struct {
	head, tail *jobSeg
	n          int
	bytes      int // the wire lengths of the segments' requests, let go a segment at a time
}

// segJobs is the number of jobs in one segment: about one read's worth of
// small messages, and a few KiB of memory.
const segJobs = 64

type jobSeg struct {
	jobs       [segJobs]job
	head, tail int
	dirty      int // the slots a reader may have written, queued or not (spawnBatch.slot): at least tail
	bytes      int // the wire lengths of the requests put in it (job.len)
	next       *jobSeg
}

var segPool = sync.Pool{New: func() any { return new(jobSeg) }}

func newSeg() *jobSeg { return segPool.Get().(*jobSeg) }

// freeSeg returns an emptied segment. Its jobs are zeroed here, all at
// once, rather than one by one as they are taken: one bulk clear of what
// was used costs less than a typed store per request.
func freeSeg(s *jobSeg) {
	clear(s.jobs[:max(s.tail, s.dirty)])
	s.head, s.tail, s.dirty, s.bytes, s.next = 0, 0, 0, 0, nil
	segPool.Put(s)
}

func (q *jobQueue) push(j job) {
	if q.tail == nil || q.tail.tail == segJobs {
		q.link(newSeg())
	}
	q.tail.jobs[q.tail.tail] = j
	q.tail.tail++
	q.tail.bytes += j.len()
	q.n++
	q.bytes += j.len()
}

// pushSegs links filled segments, s and the ones linked after it; the
// queue owns them from now on.
func (q *jobQueue) pushSegs(s *jobSeg) {
	for s != nil {
		next := s.next
		s.next = nil
		q.link(s)
		q.n += s.tail - s.head
		q.bytes += s.bytes
		s = next
	}
}

func (q *jobQueue) link(s *jobSeg) {
	if q.tail == nil {
		q.head, q.tail = s, s
		return
	}
	q.tail.next, q.tail = s, s
}

// pop takes the oldest job; the queue must not be empty.
func (q *jobQueue) pop() job {
	var j job
	q.popInto(&j)
	return j
}

// popInto is pop into *dst, one copy of the job. Its slot is cleared when
// its segment is freed (freeSeg), which is soon: the segment is dropped
// once its last job is taken.
func (q *jobQueue) popInto(dst *job) {
	for q.head.head == q.head.tail {
		q.dropHead()
	}
	s := q.head
	*dst = s.jobs[s.head]
	s.head++
	q.n--
	if s.head == s.tail {
		if s.tail == segJobs || s != q.tail {
			q.dropHead()
		} else {
			// The queue is empty: its last segment starts over, cleared.
			clear(s.jobs[:max(s.tail, s.dirty)])
			s.head, s.tail, s.dirty = 0, 0, 0
			q.bytes -= s.bytes
			s.bytes = 0
		}
	}
}

func (q *jobQueue) dropHead() {
	s := q.head
	q.bytes -= s.bytes
	q.head = s.next
	if q.head == nil {
		q.tail = nil
	}
	freeSeg(s)
}

// takeAll empties the queue into a new slice.
func (q *jobQueue) takeAll() []job {
	out := make([]job, 0, q.n)
	for q.n > 0 {
		out = append(out, q.pop())
	}
	for q.head != nil {
		q.dropHead()
	}
	return out
}

// handlerError marks a handler's own error, so that wireCode sends its
// code but not the reason of a messenger sentinel it may wrap.
type handlerError struct{ err error }

func (e handlerError) Error() string { return e.err.Error() }
