package messenger_test

import (
	"errors"
	"runtime"
	"sync/atomic"
	"testing"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/velo-go/velo"
)

// goroutineSlack is what the goroutine counts below allow beyond the
// workers a test expects: a transport's writer woken to finish a write, say.
// The failures these tests catch are a goroutine per request: hundreds.
const goroutineSlack = 4

// TestNodeCapRefusesWithErrOverloaded: with the node running as many
// handlers as WithMaxRunningHandlers allows, a request of any dispatch mode
// is answered at once with ErrOverloaded, which the caller matches with
// errors.Is; the refused requests start no goroutine; once a handler
// finishes, the node takes requests again.
func TestNodeCapRefusesWithErrOverloaded(t *testing.T) {
	const capacity, refused = 3, 60
	sm := newMetrics(t)
	a, b := pair(t, nil, []velo.Option{velo.WithMaxRunningHandlers(capacity), velo.WithMetrics(sm)})
	ctx := testCtx(t)
	hold, in := newGate(t), make(chan struct{}, capacity)
	must(t, b.Register(velo.UnaryHandler("slow", func(c *velo.Context) ([]byte, error) {
		in <- struct{}{}
		return []byte("done"), hold.wait()
	})))
	must(t, b.Register(velo.UnaryHandler("ord", func(c *velo.Context) ([]byte, error) {
		return []byte("done"), nil
	}, velo.WithOrdered())))
	must(t, a.WaitForHandler(ctx, b.InstanceID(), "slow"))

	base := runtime.NumGoroutine()
	var running []<-chan result
	for range capacity {
		running = append(running, callAsync(t, ctx, a, b.InstanceID(), "slow", nil))
	}
	for range capacity {
		recv(t, in, "a handler to start")
	}
	var late []<-chan result
	for i := range refused {
		name := "slow"
		if i%2 == 1 {
			name = "ord"
		}
		late = append(late, callAsync(t, ctx, a, b.InstanceID(), name, nil))
	}
	for i, ch := range late {
		res := recv(t, ch, "a refused call")
		if !errors.Is(res.err, velo.ErrOverloaded) {
			t.Fatalf("call %d at the cap: %v, want ErrOverloaded", i, res.err)
		}
		if re := remoteErr(t, res.err); re.Reason != "overloaded" || re.Code != velo.ResourceExhausted {
			t.Fatalf("call %d: reason %q code %v, want overloaded, ResourceExhausted", i, re.Reason, re.Code)
		}
	}
	if n := runtime.NumGoroutine() - base; n > capacity+goroutineSlack {
		t.Fatalf("%d goroutines more than before, with %d handlers running and %d refused", n, capacity, refused)
	}
	if n := testutil.ToFloat64(sm.DispatchFailures.WithLabelValues("dispatch", "overloaded")); n != refused {
		t.Fatalf("overloaded refusals counted: %v, want %d", n, refused)
	}
	hold.open()
	for _, ch := range running {
		if res := recv(t, ch, "a running call"); res.err != nil || string(res.resp) != "done" {
			t.Fatalf("a call admitted under the cap: %q, %v", res.resp, res.err)
		}
	}
	if _, err := a.Unary(ctx, b.InstanceID(), "ord", nil); err != nil {
		t.Fatalf("a call after the handlers finished: %v", err)
	}
}

// TestCapFreesItsPlaceBeforeTheAnswer: at a cap of 1, a caller that makes
// one call at a time is never refused, in spawn or ordered mode. The run's
// place is given back before its answer goes, so the next request, sent on
// that answer, finds it free.
func TestCapFreesItsPlaceBeforeTheAnswer(t *testing.T) {
	const calls = 300
	a, b := pair(t, nil, []velo.Option{velo.WithMaxRunningHandlers(1)})
	ctx := testCtx(t)
	echo := func(c *velo.Context) ([]byte, error) { return c.Payload, nil }
	must(t, b.Register(velo.UnaryHandler("spawn", echo)))
	must(t, b.Register(velo.UnaryHandler("ord", echo, velo.WithOrdered())))
	must(t, a.WaitForHandler(ctx, b.InstanceID(), "ord"))
	for i := range calls {
		name := "spawn"
		if i%2 == 1 {
			name = "ord"
		}
		if _, err := a.Unary(ctx, b.InstanceID(), name, nil); err != nil {
			t.Fatalf("call %d (%s), one at a time under a cap of 1: %v", i, name, err)
		}
	}
}

// TestMaxConcurrentBoundsGoroutines: requests over a spawn handler's
// WithMaxConcurrent wait in its queue, not on goroutines of their own (the
// handler used to start one goroutine per request, each parked on the
// permit), and they all run once the first ones finish, never more than
// the limit at once.
func TestMaxConcurrentBoundsGoroutines(t *testing.T) {
	const limit, calls = 2, 200
	sm := newMetrics(t)
	a, b := pair(t, nil, []velo.Option{velo.WithMetrics(sm)})
	ctx := testCtx(t)
	hold, in := newGate(t), make(chan struct{}, calls)
	var active, peak atomic.Int64
	must(t, b.Register(velo.UnaryHandler("two", func(c *velo.Context) ([]byte, error) {
		if n := active.Add(1); n > peak.Load() {
			peak.Store(n)
		}
		defer active.Add(-1)
		in <- struct{}{}
		return c.Payload, hold.wait()
	}, velo.WithMaxConcurrent(limit))))
	must(t, a.WaitForHandler(ctx, b.InstanceID(), "two"))

	base := runtime.NumGoroutine()
	delivered := testutil.ToFloat64(sm.InboundDequeued)
	var results []<-chan result
	for i := range calls {
		results = append(results, callAsync(t, ctx, a, b.InstanceID(), "two", seq(i)))
	}
	for range limit {
		recv(t, in, "a handler to start")
	}
	waitFor(t, "every request to reach dispatch", func() bool {
		return testutil.ToFloat64(sm.InboundDequeued)-delivered >= calls
	})
	if n := runtime.NumGoroutine() - base; n > limit+goroutineSlack {
		t.Fatalf("%d goroutines more than before, for %d requests under WithMaxConcurrent(%d)", n, calls, limit)
	}
	hold.open()
	for i, ch := range results {
		if res := recv(t, ch, "a call"); res.err != nil || unseq(res.resp) != i {
			t.Fatalf("call %d: %v, %v", i, res.resp, res.err)
		}
	}
	if p := peak.Load(); p != limit {
		t.Fatalf("%d handlers ran at once, want %d", p, limit)
	}
}

// TestSpawnRequestNeverWaitsForAnotherHandler: in spawn mode a request
// never waits for another one's handler to return, even when they arrive
// together (one read) and workers are reused: the first handler waits
// until every other request of the burst has run.
func TestSpawnRequestNeverWaitsForAnotherHandler(t *testing.T) {
	const burst = 100
	a, b := pair(t, nil, nil)
	ctx := testCtx(t)
	others := make(chan struct{}, burst)
	allRan := make(chan struct{})
	var ran atomic.Int64
	must(t, b.Register(velo.UnaryHandler("spawn", func(c *velo.Context) ([]byte, error) {
		if unseq(c.Payload) == 0 {
			select {
			case <-allRan:
				return nil, nil
			case <-ctx.Done():
				return nil, errors.New("the other requests never ran while this handler waited")
			}
		}
		if ran.Add(1) == burst-1 {
			close(allRan)
		}
		others <- struct{}{}
		return nil, nil
	})))
	must(t, a.WaitForHandler(ctx, b.InstanceID(), "spawn"))
	var results []<-chan result
	for i := range burst {
		results = append(results, callAsync(t, ctx, a, b.InstanceID(), "spawn", seq(i)))
	}
	for i, ch := range results {
		if res := recv(t, ch, "a call"); res.err != nil {
			t.Fatalf("call %d: %v", i, res.err)
		}
	}
}
