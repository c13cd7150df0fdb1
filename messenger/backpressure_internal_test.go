package messenger

import (
	"math/rand/v2"
	"runtime"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/velo-go/velo/metrics"
)

// readInto delivers n requests to r as a reader does one read of them:
// gathered into segments, then finished (which may wait, awaitDrain).
func readInto(t *testing.T, r *registered, n int, mk func() job) {
	var b spawnBatch
	for range n {
		j := mk()
		b.dispatch(r, &j)
	}
	b.finish()
}

// finishes runs f on a goroutine and fails the test unless it returns
// within failAfter: a reader that waits for ever is the bug looked for.
func finishes(t *testing.T, what string, f func()) {
	t.Helper()
	done := make(chan struct{})
	go func() { defer close(done); f() }()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatalf("%s never returned", what)
	}
}

// TestSpawnQueueBoundHolds: a reader that outruns its handler's workers
// waits after a read that took the queue over its bound, so the queue
// never holds more than the bound and one read; every request runs.
// GOMAXPROCS(1) lets the reader run ahead of the workers it starts, as a
// busy receiver does, so that it does meet the bound.
func TestSpawnQueueBoundHolds(t *testing.T) {
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(1))
	const limit, perRead, reads = 256, 100, 200
	m, st := poolNode(t, DefaultMaxRunningHandlers)
	m.spawnQueue = queueLimits{requests: limit}
	var ran atomic.Int64
	r := m.newRegistered(FireHandler("sink", func(*Context) { ran.Add(1) }), false)
	vm, err := metrics.Register(prometheus.NewRegistry())
	if err != nil {
		t.Fatal(err)
	}
	r.met = newHandlerMetrics(vm, "sink")
	for range reads {
		readInto(t, r, perRead, func() job { return fireJob(t, st) })
	}
	drained(t, st, "the reads")
	if n := ran.Load(); n != reads*perRead {
		t.Fatalf("%d requests ran, want %d", n, reads*perRead)
	}
	r.pool.mu.Lock()
	maxQ, pauses := r.pool.maxQueued, r.pool.pauses
	r.pool.mu.Unlock()
	t.Logf("%d requests in reads of %d: at most %d queued (bound %d), %d waits", reads*perRead, perRead, maxQ, limit, pauses)
	if maxQ > limit+perRead {
		t.Fatalf("the queue held %d requests, more than its bound %d and one read of %d", maxQ, limit, perRead)
	}
	if pauses == 0 {
		t.Fatal("the reader never waited, so the bound was not tried")
	}
	if n := testutil.ToFloat64(vm.SpawnQueueWaits.WithLabelValues("sink")); n != float64(pauses) {
		t.Fatalf("velo_messenger_spawn_queue_waits_total is %v after %d waits", n, pauses)
	}
}

// TestSpawnQueueByteBound: the bound in bytes holds as the one in requests
// does, for requests large enough that a few hundred of them are MiBs.
func TestSpawnQueueByteBound(t *testing.T) {
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(1))
	const limit, size, perRead, reads = 64 << 10, 1 << 10, 32, 200
	m, st := poolNode(t, DefaultMaxRunningHandlers)
	m.spawnQueue = queueLimits{bytes: limit}
	var ran atomic.Int64
	var most atomic.Int64
	r := m.newRegistered(FireHandler("sink", func(*Context) { ran.Add(1) }), false)
	payload := make([]byte, size)
	r.pool.onPause = func() { // the reader holds no lock here; the pool's is quick
		r.pool.mu.Lock()
		most.Store(max(most.Load(), int64(r.pool.q.bytes)))
		r.pool.mu.Unlock()
	}
	for range reads {
		readInto(t, r, perRead, func() job { j := fireJob(t, st); j.payload = payload; return j })
	}
	drained(t, st, "the reads")
	if n := ran.Load(); n != reads*perRead {
		t.Fatalf("%d requests ran, want %d", n, reads*perRead)
	}
	r.pool.mu.Lock()
	pauses := r.pool.pauses
	r.pool.mu.Unlock()
	// One read is 32 KiB and more (headers); the segments' bytes are let
	// go a segment at a time, so one segment of slack too.
	slack := int64(2 * perRead * (size + 64))
	t.Logf("at most %d bytes queued at a wait (bound %d), %d waits", most.Load(), limit, pauses)
	if most.Load() > limit+slack {
		t.Fatalf("the queue held %d bytes, more than its bound %d and a read", most.Load(), limit)
	}
	if pauses == 0 {
		t.Fatal("the reader never waited, so the bound was not tried")
	}
}

// TestSpawnQueueNoWaitAtACap: the handlers that run wait for answers that
// the reader would read only after its read is done (as the answers to
// their own calls would come behind it on the connection), and the pool
// may start no more workers: at its WithMaxConcurrent, or at the node's
// MaxRunningHandlers. The reader must not wait for the queue then; it
// used to be the deadlock such a wait would make. Without a cap, workers
// start for every request, so the reader waits only until they took the
// queue down, however long their handlers wait.
func TestSpawnQueueNoWaitAtACap(t *testing.T) {
	for _, tc := range []struct {
		name                string
		maxRuns, maxConcurr int
	}{
		{"max-concurrent", DefaultMaxRunningHandlers, 2},
		{"max-running-handlers", 2, 0},
		{"uncapped", DefaultMaxRunningHandlers, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			const limit, perRead = 16, 64 // one segment: queued at once, in finish
			m, st := poolNode(t, tc.maxRuns)
			m.spawnQueue = queueLimits{requests: limit}
			answers := make(chan struct{})
			var ran atomic.Int64
			h := FireHandler("caller", func(*Context) { <-answers; ran.Add(1) })
			if tc.maxConcurr > 0 {
				h = FireHandler("caller", func(*Context) { <-answers; ran.Add(1) }, WithMaxConcurrent(tc.maxConcurr))
			}
			r := m.newRegistered(h, false)
			finishes(t, "the read", func() {
				readInto(t, r, perRead, func() job { return fireJob(t, st) })
			})
			close(answers) // the reader reads on: the answers arrive
			drained(t, st, "the read")
			if n := ran.Load(); n != perRead {
				t.Fatalf("%d requests ran, want %d", n, perRead)
			}
		})
	}
}

// TestSpawnQueueWaitEndsAtTeardown: a reader waiting for the queue to go
// down returns as soon as the node stops, and what was queued is refused
// (its guards released), not stranded. The workers are held off the queue
// (the test holds the pool's lock) so that only teardown can end the wait.
func TestSpawnQueueWaitEndsAtTeardown(t *testing.T) {
	const limit, perRead = 16, 64
	m, st := poolNode(t, DefaultMaxRunningHandlers)
	m.spawnQueue = queueLimits{requests: limit}
	r := m.newRegistered(FireHandler("sink", func(*Context) {}), false)
	paused := make(chan struct{})
	r.pool.onPause = func() {
		r.pool.mu.Lock() // unlocked by the test once the reader returned
		close(paused)
	}
	returned := make(chan struct{})
	go func() {
		defer close(returned)
		readInto(t, r, perRead, func() job { return fireJob(t, st) })
	}()
	select {
	case <-paused:
	case <-time.After(10 * time.Second):
		t.Fatal("the reader never waited on a queue over its bound")
	}
	m.stopped.Store(true)
	close(m.done)
	select {
	case <-returned:
	case <-time.After(10 * time.Second):
		t.Fatal("the waiting reader did not return at teardown")
	}
	r.pool.mu.Unlock()
	drained(t, st, "the queued requests")
}

// TestJobQueueAccounting: however requests come (one at a time, or in
// segments a reader filled, some of them full) and go (one at a time, or
// all at teardown), the queue's count and bytes are those of the requests
// it holds, as segments let them go: never below zero, never a request
// counted twice, and both zero once the queue is empty.
func TestJobQueueAccounting(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	var q jobQueue
	var held []int // the wire length of each request queued, oldest first
	mk := func() job {
		return job{payload: make([]byte, rng.IntN(300))}
	}
	check := func(step int) {
		t.Helper()
		if q.n != len(held) {
			t.Fatalf("step %d: n = %d, want %d", step, q.n, len(held))
		}
		segBytes, jobs := 0, 0
		for s := q.head; s != nil; s = s.next {
			segBytes += s.bytes
			jobs += s.tail - s.head
		}
		if q.bytes != segBytes || jobs != q.n {
			t.Fatalf("step %d: bytes %d over segments holding %d (%d jobs, n %d)", step, q.bytes, segBytes, jobs, q.n)
		}
		sum := 0
		for _, l := range held {
			sum += l
		}
		// Segments let their bytes go whole: the queue counts at least what
		// it holds, and at most what it holds and one segment's worth.
		if q.bytes < sum || q.bytes > sum+segJobs*400 {
			t.Fatalf("step %d: bytes %d for %d requests of %d bytes", step, q.bytes, len(held), sum)
		}
		if len(held) == 0 && q.bytes != 0 {
			t.Fatalf("step %d: an empty queue counts %d bytes", step, q.bytes)
		}
	}
	for step := range 20000 {
		switch op := rng.IntN(10); {
		case op < 3:
			j := mk()
			held = append(held, j.len())
			q.push(j)
		case op < 5:
			s := newSeg()
			for range 1 + rng.IntN(segJobs) {
				j := mk()
				s.jobs[s.tail] = j
				s.bytes += j.len()
				s.tail++
				held = append(held, j.len())
			}
			q.pushSegs(s)
		case op < 9:
			if q.n > 0 {
				var j job
				q.popInto(&j)
				if j.len() != held[0] {
					t.Fatalf("step %d: took a request of %d bytes, want the oldest, of %d", step, j.len(), held[0])
				}
				held = held[1:]
			}
		default:
			if rng.IntN(20) == 0 {
				if got := q.takeAll(); len(got) != len(held) {
					t.Fatalf("step %d: takeAll gave %d requests, want %d", step, len(got), len(held))
				}
				held = held[:0]
			}
		}
		check(step)
	}
}
