package messenger

import (
	"context"
	"runtime"
	"sync/atomic"
	"testing"
	"time"

	"github.com/velo-go/velo/ext"
)

// poolNode is a messenger with just enough in it for dispatch: requests
// are fire-and-forget, so nothing is answered.
func poolNode(t *testing.T, maxRuns int) (*Messenger, *ext.ShutdownState) {
	m := &Messenger{done: make(chan struct{}), maxRuns: int64(maxRuns)}
	t.Cleanup(func() {
		select {
		case <-m.done:
		default:
			m.stopped.Store(true) // as teardown does, first
			close(m.done)         // parked workers leave
		}
	})
	return m, ext.NewShutdownState()
}

func fireJob(t *testing.T, st *ext.ShutdownState) job {
	g, ok := st.TryAcquire()
	if !ok {
		t.Fatal("the test's shutdown state refused a request")
	}
	return job{guard: g, hdr: requestHeader{rtype: FireAndForget}}
}

func drained(t *testing.T, st *ext.ShutdownState, what string) {
	t.Helper()
	st.BeginDrain()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := st.WaitForDrain(ctx); err != nil {
		t.Fatalf("%s: %v", what, err)
	}
}

// TestSpawnBurstReusesWorkers: a burst of short requests, delivered as a
// reader delivers them (in reads of 64), is run by a few workers that come
// back for more, not by a goroutine started or woken per request (which is
// what the pool did before: 6,400 hand-offs for 6,400 requests).
func TestSpawnBurstReusesWorkers(t *testing.T) {
	const reads, perRead = 100, 64
	m, st := poolNode(t, DefaultMaxRunningHandlers)
	var ran atomic.Int64
	r := m.newRegistered(FireHandler("burst", func(*Context) { ran.Add(1) }), false)
	for range reads {
		var b spawnBatch
		for range perRead {
			j := fireJob(t, st)
			b.dispatch(r, &j)
		}
		b.flush()
	}
	drained(t, st, "the burst")
	if n := ran.Load(); n != reads*perRead {
		t.Fatalf("%d requests ran, want %d", n, reads*perRead)
	}
	r.pool.mu.Lock()
	handoffs := r.pool.handoffs
	r.pool.mu.Unlock()
	t.Logf("%d requests, %d workers woken or started", reads*perRead, handoffs)
	if handoffs > reads*perRead/4 {
		t.Fatalf("%d hand-offs for %d requests: workers are not reused", handoffs, reads*perRead)
	}
}

// TestSpawnPoolWaitsForTheCapWithoutAGoroutine: a request admitted below
// the node's cap whose pool finds the node at its cap when it would start
// a worker starts none; it runs when another handler finishes. The pool
// registers as starved and the finishing run starts its worker. Without
// that hand-over the request would wait until the next request to its own
// handler, or for ever.
func TestSpawnPoolWaitsForTheCapWithoutAGoroutine(t *testing.T) {
	m, st := poolNode(t, 1)
	in, hold := make(chan struct{}), make(chan struct{})
	busy := m.newRegistered(FireHandler("busy", func(*Context) { close(in); <-hold }), false)
	ran := make(chan struct{})
	waiting := m.newRegistered(FireHandler("waiting", func(*Context) { close(ran) }), false)
	busy.dispatch(fireJob(t, st))
	select {
	case <-in:
	case <-time.After(10 * time.Second):
		t.Fatal("the first handler never ran")
	}
	// Admitted before the cap was reached (same read), queued after.
	waiting.pool.submit(waiting, fireJob(t, st))
	waiting.pool.mu.Lock()
	workers, starved, queued := waiting.pool.workers, waiting.pool.starved, waiting.pool.q.n
	waiting.pool.mu.Unlock()
	if workers != 0 || !starved || queued != 1 {
		t.Fatalf("at the cap: %d workers, starved %v, %d queued; want 0, true, 1", workers, starved, queued)
	}
	// A request that arrives now is refused at once, not queued.
	if !m.overCap() {
		t.Fatal("the node is not at its cap with one handler running and a cap of 1")
	}
	close(hold)
	select {
	case <-ran:
	case <-time.After(10 * time.Second):
		t.Fatal("the waiting request never ran after the running handler finished")
	}
	drained(t, st, "both requests")
}

// TestSystemRunsLeaveTheCapToUsers: velo's own handlers (the handshake,
// event triggers) are not counted against WithMaxRunningHandlers. A node
// with a cap of 1 that is answering a handshake when a user's request
// arrives runs the request; it used to refuse it with ErrOverloaded.
func TestSystemRunsLeaveTheCapToUsers(t *testing.T) {
	m, st := poolNode(t, 1)
	in, hold := make(chan struct{}), make(chan struct{})
	defer close(hold)
	sys := m.newRegistered(FireHandler("_sys", func(*Context) { close(in); <-hold }), true)
	sys.dispatch(fireJob(t, st))
	select {
	case <-in:
	case <-time.After(10 * time.Second):
		t.Fatal("the system handler never ran")
	}
	if m.overCap() {
		t.Fatal("a running system handler put the node at its cap of 1")
	}
	ran := make(chan struct{})
	user := m.newRegistered(FireHandler("user", func(*Context) { close(ran) }), false)
	user.dispatch(fireJob(t, st))
	select {
	case <-ran:
	case <-time.After(10 * time.Second):
		t.Fatal("the user's request never ran while a system handler ran")
	}
}

// TestSpawnReadNeverWaitsBehindABlockedHandler: requests that arrive in
// one read are handed to the pool together, and the first of them blocks
// until all the others have run. The worker that takes it must first make
// sure another worker comes for the rest; a pool that let one worker run a
// read's requests one after the other would wait here for ever.
func TestSpawnReadNeverWaitsBehindABlockedHandler(t *testing.T) {
	const n = 10
	m, st := poolNode(t, DefaultMaxRunningHandlers)
	var others atomic.Int64
	allRan := make(chan struct{})
	first := true
	r := m.newRegistered(FireHandler("read", func(c *Context) {
		if c.Payload != nil {
			<-allRan
			return
		}
		if others.Add(1) == n-1 {
			close(allRan)
		}
	}), false)
	var b spawnBatch
	for range n {
		j := fireJob(t, st)
		if first {
			j.payload, first = []byte("block"), false
		}
		b.dispatch(r, &j)
	}
	b.flush()
	select {
	case <-allRan:
	case <-time.After(10 * time.Second):
		t.Fatalf("%d of %d requests ran while the first one's handler waited for them", others.Load(), n-1)
	}
	drained(t, st, "the read")
}

// TestSpawnWorkerGoexitGivesBack: a handler that calls runtime.Goexit on
// a worker (t.FailNow from a handler, say) ends the worker with it. Its
// request must still be released (the drain waits for it) and the node's
// running count given back: at a cap of one, a leaked count would leave
// the next request starved for ever. The pool's place and worker count
// are given back, and the request behind gets a worker of its own.
func TestSpawnWorkerGoexitGivesBack(t *testing.T) {
	m, st := poolNode(t, 1)
	var calls atomic.Int32
	ran := make(chan struct{})
	r := m.newRegistered(FireHandler("exits", func(*Context) {
		if calls.Add(1) == 1 {
			runtime.Goexit()
		}
		close(ran)
	}), false)
	r.pool.submit(r, fireJob(t, st))
	r.pool.submit(r, fireJob(t, st))
	select {
	case <-ran:
	case <-time.After(10 * time.Second):
		t.Fatal("the request behind the one whose handler called Goexit never ran")
	}
	drained(t, st, "after a handler's Goexit")
	if n := m.runs.Load(); n != 0 {
		t.Errorf("the node counts %d running handlers, want 0", n)
	}
	r.pool.mu.Lock()
	running, workers, parked := r.pool.running, r.pool.workers, r.pool.parked
	r.pool.mu.Unlock()
	if running != 0 || workers != parked {
		t.Errorf("the pool: %d running, %d workers of which %d parked; want 0 running, every worker parked", running, workers, parked)
	}
}
