package messenger

// ---- backpressure of spawn-mode queues ----
//
// A connection's reader can hand a spawn pool requests faster than its
// workers run them: a sender of one-way messages is held back only by its
// own transport's gate, which knows nothing of the receiver's handlers. The
// queue then grew without bound for as long as the sender kept on, and
// every queued request kept the read buffer it aliases alive: a run of
// half a million small messages held some 50 MiB, all of it fresh memory
// for the allocator to fault in and for every GC cycle to mark.
//
// So a reader that finds a pool's queue over its bound after a read waits,
// before it reads again, until the workers took the queue down to half of
// the bound. The socket's buffers fill meanwhile and TCP pushes back on the
// sender, whose gate then makes its Send wait. Nothing is refused or lost.
//
// The wait comes after everything the read brought is handed on: requests
// may be followed in the same read by an answer, an event or a goodbye,
// which must not stay behind the wait. Only the transport knows whether
// more of the read follows a batch, so a reader that can make the wait
// itself at the end of its read says so (ext.WaitDeferrer) and is handed
// the wait (spawnBatch.noteOver, drainWait); with a transport that gives
// no such sign the sink waits once the batch is queued. A loopback send is
// such a batch, so a sender to its own node waits in Send.
//
// The reader also carries the answers to this node's own calls, and a
// running handler may wait on one of them: a reader that waited for such a
// handler would wait for ever. It therefore waits only while the pool has a
// searching worker (spawnPool), one on its way to the queue and in no
// handler, which takes a request without waiting on anything but the pool's
// lock. (A reader that runs the pool's queue itself, runClaimed, stands
// for that worker: a reader about to wait on it alone hands its
// connection on, and the pool wakes a worker; takerLocked.) Each worker
// that takes one either leaves the next searching worker
// behind or finds the pool at a cap (WithMaxConcurrent, MaxRunningHandlers)
// and may not; in that case it wakes the reader, which reads on (the queue
// grows under WithMaxConcurrent; at the node's cap what comes is refused).
// So every wait ends after a bounded number of requests have been taken,
// however long their handlers run, and teardown (done) ends it at once.

// queueLimits bounds a spawn pool's queue in requests and in bytes (the
// requests' wire lengths); a reader waits above either and reads again once
// the queue is at or below half of both.
type queueLimits struct {
	requests int // 0: no bound
	bytes    int // 0: no bound
}

// queueBound turns a Config bound into a queueLimits one: 0 is the default,
// a negative bound none.
func queueBound(n, def int) int {
	switch {
	case n == 0:
		return def
	case n < 0:
		return -1
	}
	return n
}

// overLocked reports whether the queue is over l, so that a reader that
// queued the last of it should wait.
func (q *jobQueue) overLocked(l queueLimits) bool {
	return (l.requests > 0 && q.n > l.requests) || (l.bytes > 0 && q.bytes > l.bytes)
}

// drainedLocked reports whether the queue is down to half of l, so that a
// waiting reader may read again.
func (q *jobQueue) drainedLocked(l queueLimits) bool {
	return (l.requests <= 0 || q.n <= l.requests/2) && (l.bytes <= 0 || q.bytes <= l.bytes/2)
}

// noteQueuedLocked is what submitSegs does after it queued: it keeps the
// queue's high mark (for tests) and reports whether the reader should wait
// (awaitDrain).
func (p *spawnPool) noteQueuedLocked(r *registered) bool {
	p.maxQueued = max(p.maxQueued, p.q.n)
	return p.q.overLocked(r.m.spawnQueue)
}

// awaitDrain is where a reader that queued over the bound waits, after its
// read, until the workers took the queue down to half of it, while a
// searching worker exists, and until teardown (see the top of this file).
func (p *spawnPool) awaitDrain(r *registered) {
	lim := r.m.spawnQueue
	p.mu.Lock()
	askedHandOn := false
	for waited := false; p.q.overLocked(lim) && p.takerLocked() && !r.m.stopped.Load(); waited = true {
		if p.searching == 0 && !askedHandOn {
			// Only a run on a reader takes the queue (readerTakes): its
			// connection is handed on now, and the pool wakes a worker
			// (poolHandOn), so that this wait is on a worker, not on a
			// handler of that run; it may be this reader's own (a
			// loopback send from a handler of the run) or block until
			// the transport's bound.
			askedHandOn = true
			h := p.onReader
			p.mu.Unlock()
			if h != nil {
				h.HandOnNow()
			}
			p.mu.Lock()
			continue
		}
		if p.drained == nil {
			p.drained = make(chan struct{})
		}
		ch := p.drained
		if !waited {
			p.pauses++
		}
		p.mu.Unlock()
		// One wait is counted once, however often a worker's wake finds
		// the queue still over its bound with another searching worker.
		if !waited && r.met != nil {
			r.met.spawnWaits().Inc()
		}
		if p.onPause != nil {
			p.onPause()
		}
		select {
		case <-ch:
		case <-r.m.done:
			return
		}
		p.mu.Lock()
	}
	p.mu.Unlock()
}

// takerLocked reports whether something takes the queue down that a
// reader may wait for: a searching worker, or a reader that claimed the
// pool and runs its queue (readerTakes). A reader about to wait on such a
// run alone has its connection handed on first (awaitDrain), so that a
// worker takes the queue; without that a claimed run left the pool with
// no searching worker, and other readers queued behind it without a
// wait.
func (p *spawnPool) takerLocked() bool { return p.searching > 0 || p.readerTakes() }

// drainWait is a handler's wait for its spawn queue as the transport's
// reader makes it, at the end of its read (ext.WaitDeferrer): a pointer
// conversion, so deferring it costs no allocation.
type drainWait registered

func (w *drainWait) Wait() {
	r := (*registered)(w)
	r.pool.awaitDrain(r)
}

// wakeDrainLocked is what a worker does after it took a request (or gave
// up taking them): it wakes the readers waiting on the queue once it is
// down to half of its bound, or when no searching worker is left to take
// the next request (the pool is at a cap, or out of work), so that no
// reader waits on a handler. force wakes them regardless.
func (p *spawnPool) wakeDrainLocked(r *registered, force bool) {
	if p.drained == nil {
		return
	}
	if force || !p.takerLocked() || p.q.drainedLocked(r.m.spawnQueue) {
		close(p.drained)
		p.drained = nil
	}
}
