package messenger

import (
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/velo-go/velo/ext"
)

// job is one admitted request on its way to its handler.
type job struct {
	msg ext.InboundMessage
	hdr requestHeader
	at  time.Time // when it was queued on an ordered lane (metrics only)
}

// registered is a handler as the messenger runs it.
type registered struct {
	Handler
	m   *Messenger
	sem chan struct{} // MaxConcurrent permits; nil when unbounded

	lanesMu sync.Mutex
	lanes   map[ext.WorkerID]*orderedLane

	pool spawnPool // workers of spawn mode

	met *handlerMetrics // nil without metrics
}

func (m *Messenger) newRegistered(h Handler) *registered {
	r := &registered{Handler: h, m: m, lanes: map[ext.WorkerID]*orderedLane{}}
	if h.opts.maxConcurrent > 0 {
		r.sem = make(chan struct{}, h.opts.maxConcurrent)
	}
	if m.met != nil {
		r.met = newHandlerMetrics(m.met, h.name)
	}
	return r
}

// dispatch hands a request to its handler in the handler's mode. It runs on
// the transport's reader goroutine and must not wait, except when an
// ordered lane with the Block policy is full.
func (r *registered) dispatch(j job) {
	switch r.opts.mode {
	case Spawn:
		r.pool.submit(r, j)
	case Inline:
		select {
		case <-r.m.done: // teardown refuses what is left, as the other modes do
			r.m.reply(j.hdr, r.name, nil, ErrShuttingDown)
			j.msg.Done()
		default:
			r.run(j) // the reader goroutine runs it: no hand-off
		}
	default:
		key := j.hdr.id.Worker()
		if r.opts.mode == OrderedGlobal {
			key = 0
		}
		r.lane(key).push(j)
	}
}

// run calls the handler, answers the caller and releases the request.
func (r *registered) run(j job) {
	if r.sem != nil {
		select {
		case r.sem <- struct{}{}:
			defer func() { <-r.sem }()
		case <-r.m.done:
			r.m.reply(j.hdr, r.name, nil, ErrShuttingDown)
			j.msg.Done()
			return
		}
	}
	c := Context{
		Payload: j.msg.Payload, Handler: r.name, m: r.m,
		headers: j.hdr.headers, sender: j.hdr.id.Worker(), rtype: j.hdr.rtype,
	}
	var start time.Time
	if r.met != nil {
		r.met.inFlight.Inc()
		start = time.Now()
	}
	resp, err := r.call(&c)
	if r.met != nil {
		r.met.inFlight.Dec()
		r.met.observe(j.hdr.rtype, err, time.Since(start), len(j.msg.Payload), len(resp))
	}
	r.m.replyOwned(j.hdr, resp, err, j.msg.Owner)
	// The guard goes last: the drain waits until the reply is admitted.
	j.msg.Done()
}

// call runs the function; a panic becomes an error for the caller.
func (r *registered) call(c *Context) (resp []byte, err error) {
	defer func() {
		if p := recover(); p != nil {
			resp, err = nil, fmt.Errorf("handler panicked: %v", p)
		}
	}()
	return r.fn(c)
}

// lane returns the live ordered lane for key, making one if needed.
func (r *registered) lane(key ext.WorkerID) *orderedLane {
	r.lanesMu.Lock()
	defer r.lanesMu.Unlock()
	if l, ok := r.lanes[key]; ok {
		return l
	}
	l := &orderedLane{r: r, key: key, notify: make(chan struct{}, 1)}
	l.space = sync.NewCond(&l.mu)
	r.lanes[key] = l
	if r.met != nil {
		r.met.lanes.Inc()
		r.met.lanesCreated.Inc()
	}
	return l
}

// orderedLane runs one sender's requests (or everyone's, for a global lane)
// in arrival order, on one goroutine that lives while the lane has work and
// stops after the idle TTL.
type orderedLane struct {
	r      *registered
	key    ext.WorkerID
	mu     sync.Mutex
	space  *sync.Cond
	q      []job
	run    bool // the lane goroutine is alive
	parked bool // it waits on notify
	dead   bool // it stopped; the lane left the map
	notify chan struct{}
	last   atomic.Int64 // unix nanos of the last job finished
}

// laneTimerArms counts idle-timer arms, for a test that holds the cost.
var laneTimerArms atomic.Int64

// push queues a job, applying the overflow policy. It starts the lane's
// goroutine when none runs.
func (l *orderedLane) push(j job) {
	l.mu.Lock()
	if l.dead {
		l.mu.Unlock()
		select {
		case <-l.r.m.done:
			// Stopped at teardown: refuse rather than look for another lane.
			l.r.m.reply(j.hdr, l.r.name, nil, ErrShuttingDown)
			j.msg.Done()
		default:
			// Retired between lookup and push: a new lane takes it.
			l.r.lane(l.key).push(j)
		}
		return
	}
	if max := l.r.opts.maxDepth; max > 0 && len(l.q) >= max {
		if l.r.opts.overflow == Reject {
			l.mu.Unlock()
			l.r.m.countFailure("dispatch", "ordered_lane_shed")
			l.r.m.reply(j.hdr, l.r.name, nil, ErrLaneFull)
			j.msg.Done()
			return
		}
		for len(l.q) >= max && !l.dead {
			l.space.Wait()
		}
		if l.dead {
			// The lane stopped (shutdown) while we waited for room.
			l.mu.Unlock()
			l.r.m.reply(j.hdr, l.r.name, nil, ErrShuttingDown)
			j.msg.Done()
			return
		}
	}
	if l.r.met != nil {
		j.at = time.Now()
		l.r.met.depth.Inc()
	}
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
	ttl := l.r.opts.idleTTL
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
	done := l.r.m.done
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
		l.space.Broadcast()
		l.mu.Unlock()
		for i := range batch {
			select {
			case <-done:
				// Teardown: what is still queued is refused, not run.
				l.refuse(batch[i:])
				l.stop()
				return
			default:
			}
			if l.r.met != nil {
				l.r.met.depth.Dec()
				l.r.met.wait.Observe(time.Since(batch[i].at).Seconds())
			}
			l.r.run(batch[i])
			batch[i] = job{}
		}
		l.last.Store(time.Now().UnixNano())
	}
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
	l.space.Broadcast()
	if l.r.lanes[l.key] == l {
		delete(l.r.lanes, l.key)
		if l.r.met != nil {
			l.r.met.lanes.Dec()
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
	l.space.Broadcast()
	l.mu.Unlock()
	if l.r.lanes[l.key] == l {
		delete(l.r.lanes, l.key)
		if l.r.met != nil {
			l.r.met.lanes.Dec()
		}
	}
	l.r.lanesMu.Unlock()
	l.refuse(q)
}

// refuse answers queued requests with ErrShuttingDown and releases them.
func (l *orderedLane) refuse(jobs []job) {
	for i := range jobs {
		if l.r.met != nil {
			l.r.met.depth.Dec()
		}
		l.r.m.reply(jobs[i].hdr, l.r.name, nil, ErrShuttingDown)
		jobs[i].msg.Done()
		jobs[i] = job{}
	}
}

// handlerMetrics are one handler's series, bound at registration.
type handlerMetrics struct {
	requests  [3][2]prometheus.Counter
	durations [3][2]prometheus.Observer
	reqBytes  [3]prometheus.Counter
	respBytes [3][2]prometheus.Counter
	inFlight  prometheus.Gauge
	lanes     prometheus.Gauge
	depth     prometheus.Gauge
	wait      prometheus.Observer

	lanesCreated prometheus.Counter
}

// spawnPool runs spawn-mode requests on reusable goroutines: each request
// still gets a goroutine of its own while it runs (a request that blocks
// never holds up another), but a busy handler reuses its workers instead of
// starting one goroutine per request. A worker that finds the queue empty
// parks, up to maxParked of them; the others exit. No timers.
type spawnPool struct {
	mu     sync.Mutex
	q      []job
	head   int
	parked int
	wake   chan struct{}
}

// maxParked bounds the idle workers one handler keeps.
const maxParked = 16

func (p *spawnPool) submit(r *registered, j job) {
	p.mu.Lock()
	// Checked under the lock that refuseQueued takes, so a request queued
	// at teardown is either run or refused, never stranded.
	select {
	case <-r.m.done:
		p.mu.Unlock()
		r.m.reply(j.hdr, r.name, nil, ErrShuttingDown)
		j.msg.Done()
		return
	default:
	}
	if p.wake == nil {
		p.wake = make(chan struct{}, maxParked)
	}
	p.q = append(p.q, j)
	if p.parked > 0 {
		p.parked--
		p.mu.Unlock()
		p.wake <- struct{}{}
		return
	}
	p.mu.Unlock()
	go p.work(r)
}

// refuseQueued answers what is still queued at teardown with
// ErrShuttingDown: a worker leaving must not strand a request's guard.
func (p *spawnPool) refuseQueued(r *registered) {
	p.mu.Lock()
	left := append([]job(nil), p.q[p.head:]...)
	clear(p.q)
	p.q, p.head = p.q[:0], 0
	p.mu.Unlock()
	for _, j := range left {
		r.m.reply(j.hdr, r.name, nil, ErrShuttingDown)
		j.msg.Done()
	}
}

// work runs queued requests until none is left, then parks or exits.
func (p *spawnPool) work(r *registered) {
	for {
		p.mu.Lock()
		if p.head == len(p.q) {
			p.q, p.head = p.q[:0], 0
			if p.parked >= maxParked {
				p.mu.Unlock()
				return
			}
			p.parked++
			p.mu.Unlock()
			select {
			case <-p.wake:
				continue
			case <-r.m.done:
				p.refuseQueued(r)
				return
			}
		}
		j := p.q[p.head]
		p.q[p.head] = job{}
		p.head++
		p.mu.Unlock()
		r.run(j)
	}
}
