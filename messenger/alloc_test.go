package messenger_test

import (
	"context"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/velo-go/velo"
)

// unaryRoundTripAllocs is the most allocations one unary round trip of a
// 64-byte payload may make, caller and server together, in one process over
// loopback TCP, without metrics. Measured on go1.26 (with and without
// -race): 2 (4 before the request buffers were pooled and the Contexts
// came by the block), and a profile (-memprofilerate=1) names them:
//
// caller:
//  1. onFrame: the copy of the reply payload that the caller keeps (the
//     read buffer goes back to its pool);
//
// server:
//  2. reply: the reply header buffer;
//  3. run: the handler Context, whose address the handler gets, one in
//     64 calls only: a spawn worker takes them from a block of its
//     own (contextSlab); an inline or ordered handler's is one each.
//
// The request is built in a pooled buffer (pooledRequestFrame), which TCP
// copies into its write batch and releases within Send.
//
// Spawn mode reuses a parked worker goroutine, so a call starts no
// goroutine (it used to: two more allocations).
//
// (Call options are allocated only when a call passes some.)
//
// The transports add none per frame: frames are coalesced into pooled
// batch buffers on the way out and read into pooled chunks on the way in.
// The bound has one allocation of slack; a growth past it is a regression
// on the hot path (design: count before you time).
const unaryRoundTripAllocs = 5

func TestUnaryRoundTripAllocs(t *testing.T) {
	if testing.Short() {
		t.Skip("counts allocations over 1000 round trips")
	}
	a, b := pair(t, nil, nil)
	ctx := testCtx(t)
	must(t, b.Register(velo.UnaryHandler("echo64", func(c *velo.Context) ([]byte, error) {
		return c.Payload, nil
	})))
	payload := make([]byte, 64)
	call := func() {
		if _, err := a.Unary(ctx, b.InstanceID(), "echo64", payload); err != nil {
			t.Fatal(err)
		}
	}
	for range 200 {
		call()
	}
	allocs := testing.AllocsPerRun(1000, call)
	t.Logf("allocations per unary round trip (both sides): %v", allocs)
	if allocs > unaryRoundTripAllocs {
		t.Errorf("allocations per unary round trip: %v, want at most %d", allocs, unaryRoundTripAllocs)
	}
}

// TestUnaryRoundTripAllocsWithMetrics: with metrics on both nodes, a
// round trip after the handler's first call looks no label set up and
// allocates no more than one without metrics. The handler binds its series
// on its first call and keeps them (messenger/metrics.go); the transport
// and pending-response series are bound already. The test points the
// handler's binder at a decoy VeloMetrics once the handler has run, so a
// lookup after that would make a series in the decoy, or miss a count in
// the real one. The allocations are compared with the same round trip
// without metrics, measured here, rather than with unaryRoundTripAllocs,
// whose slack would hide one.
func TestUnaryRoundTripAllocsWithMetrics(t *testing.T) {
	if testing.Short() {
		t.Skip("counts allocations over 1000 round trips")
	}
	ctx := testCtx(t)
	payload := make([]byte, 64)
	measure := func(a, b *velo.Node, h string, rebind func()) float64 {
		call := func() {
			if _, err := a.Unary(ctx, b.InstanceID(), h, payload); err != nil {
				t.Fatal(err)
			}
		}
		for range 200 {
			call()
		}
		rebind()
		return testing.AllocsPerRun(1000, call) // and one warm-up call
	}
	register := func(b *velo.Node) {
		echo := func(c *velo.Context) ([]byte, error) { return c.Payload, nil }
		must(t, b.Register(velo.UnaryHandler("echo64", echo)))
		must(t, b.Register(velo.UnaryHandler("ordered64", echo, velo.WithOrdered())))
	}
	a0, b0 := pair(t, nil, nil)
	register(b0)
	vm, decoy := newMetrics(t), newMetrics(t)
	a1, b1 := pair(t, []velo.Option{velo.WithMetrics(newMetrics(t))}, []velo.Option{velo.WithMetrics(vm)})
	register(b1)
	for _, h := range []string{"echo64", "ordered64"} {
		without := measure(a0, b0, h, func() {})
		with := measure(a1, b1, h, func() { b1.Messenger().RebindHandlerMetrics(h, decoy) })
		t.Logf("%s: allocations per unary round trip (both sides): %v without metrics, %v with", h, without, with)
		slack := 0.0
		if raceEnabled {
			slack = 1 // see raceEnabled
		}
		if with > without+slack {
			t.Errorf("%s: metrics add %v allocations per round trip, want none", h, with-without)
		}
		if n := testutil.ToFloat64(vm.HandlerRequests.WithLabelValues(h, "unary", "success")); n != 1201 {
			t.Errorf("%s: %v requests counted, want 1201", h, n)
		}
	}
	for name, c := range map[string]prometheus.Collector{
		"requests": decoy.HandlerRequests, "duration": decoy.HandlerDuration,
		"request bytes": decoy.HandlerRequestBytes, "response bytes": decoy.HandlerResponseBytes,
		"in flight": decoy.HandlerInFlight, "lanes": decoy.OrderedLanes, "lane depth": decoy.OrderedLaneDepth,
		"lane wait": decoy.OrderedLaneWait, "lanes created": decoy.OrderedLanesCreated,
	} {
		if n := testutil.CollectAndCount(c); n != 0 {
			t.Errorf("%s: %d label sets looked up after the handlers' first calls, want 0", name, n)
		}
	}
}

// TestUnaryWithDeadlineRoundTripAllocs: a call whose context has a
// deadline sends it to the handler (DeadlineHeader) and costs no more
// allocations than one without: the header goes into the request header's
// own buffer, and the handler reads it in place. A handler that never
// asks for its context.Context pays nothing for it.
func TestUnaryWithDeadlineRoundTripAllocs(t *testing.T) {
	if testing.Short() {
		t.Skip("counts allocations over 1000 round trips")
	}
	a, b := pair(t, nil, nil)
	ctx, cancel := context.WithTimeout(context.Background(), time.Hour) // made once, as a caller's request scope is
	defer cancel()
	must(t, b.Register(velo.UnaryHandler("echo64", func(c *velo.Context) ([]byte, error) {
		return c.Payload, nil
	})))
	payload := make([]byte, 64)
	call := func() {
		if _, err := a.Unary(ctx, b.InstanceID(), "echo64", payload); err != nil {
			t.Fatal(err)
		}
	}
	for range 200 {
		call()
	}
	allocs := testing.AllocsPerRun(1000, call)
	t.Logf("allocations per unary round trip with a deadline (both sides): %v", allocs)
	if allocs > unaryRoundTripAllocs {
		t.Errorf("allocations per unary round trip with a deadline: %v, want at most %d", allocs, unaryRoundTripAllocs)
	}
}

// handlerContextAllocs is the most that a handler's first call to
// Context() may add to a round trip with a deadline. Measured on go1.26:
// 10, all of the context package's making but one (the table entry): the
// cancel context and its cancel function, the deadline context, its
// timer, its cancel function and its parent's set of children, and what
// cancelling them at the handler's end takes. A bound of 2 over that.
const handlerContextAllocs = 12

// TestHandlerContextAllocs holds what a handler that asks for its context
// pays to a bound: it is paid only by handlers that ask.
func TestHandlerContextAllocs(t *testing.T) {
	if testing.Short() {
		t.Skip("counts allocations over 1000 round trips")
	}
	a, b := pair(t, nil, nil)
	ctx, cancel := context.WithTimeout(context.Background(), time.Hour)
	defer cancel()
	must(t, b.Register(velo.UnaryHandler("ctx64", func(c *velo.Context) ([]byte, error) {
		if c.Context().Err() != nil {
			return nil, c.Context().Err()
		}
		return c.Payload, nil
	})))
	payload := make([]byte, 64)
	call := func() {
		if _, err := a.Unary(ctx, b.InstanceID(), "ctx64", payload); err != nil {
			t.Fatal(err)
		}
	}
	for range 200 {
		call()
	}
	allocs := testing.AllocsPerRun(1000, call)
	t.Logf("allocations per round trip whose handler asks for its context: %v", allocs)
	if allocs > unaryRoundTripAllocs+handlerContextAllocs {
		t.Errorf("allocations per round trip whose handler asks for its context: %v, want at most %d", allocs, unaryRoundTripAllocs+handlerContextAllocs)
	}
}

// unaryAsyncRoundTripAllocs is an asynchronous round trip's count, two
// under unaryRoundTripAllocs and with no slack. It was five: the request
// had a frame of its own instead of a pooled buffer (sendRequest), and
// the closure that frees a staged payload went to the heap on every call
// (the goroutine of a first call captured it).
const unaryAsyncRoundTripAllocs = 3

// TestUnaryAsyncRoundTripAllocs holds UnaryAsync to its bound: the
// callback replaces the waiting goroutine and costs nothing per call (it is
// made once here, as a caller would keep one), and a context that cannot
// end arms no watch.
func TestUnaryAsyncRoundTripAllocs(t *testing.T) {
	if testing.Short() {
		t.Skip("counts allocations over 1000 round trips")
	}
	a, b := pair(t, nil, nil)
	ctx := context.Background()
	must(t, b.Register(velo.UnaryHandler("echo64", func(c *velo.Context) ([]byte, error) {
		return c.Payload, nil
	}, velo.WithInline())))
	must(t, a.WaitForHandler(testCtx(t), b.InstanceID(), "echo64"))
	payload := make([]byte, 64)
	done := make(chan error, 1)
	cb := func(_ []byte, err error) { done <- err }
	call := func() {
		must(t, a.UnaryAsync(ctx, b.InstanceID(), "echo64", payload, cb))
		must(t, <-done)
	}
	for range 200 {
		call()
	}
	allocs := testing.AllocsPerRun(1000, call)
	t.Logf("allocations per asynchronous round trip (both sides): %v", allocs)
	if allocs > unaryAsyncRoundTripAllocs {
		t.Errorf("allocations per asynchronous round trip: %v, want at most %d", allocs, unaryAsyncRoundTripAllocs)
	}
}

// BenchmarkUnaryAsyncRoundTrip chains UnaryAsync calls to an inline echo
// handler, each callback sending the next request: the round trip with no
// goroutine hand-off, as the ping-pong harness's velo-async arm runs it.
func BenchmarkUnaryAsyncRoundTrip(b *testing.B) {
	a, srv := pair(b, nil, nil)
	must(b, srv.Register(velo.UnaryHandler("echo64", func(c *velo.Context) ([]byte, error) {
		return c.Payload, nil
	}, velo.WithInline())))
	must(b, a.WaitForHandler(testCtx(b), srv.InstanceID(), "echo64"))
	ctx := context.Background()
	payload := make([]byte, 64)
	done := make(chan error, 1)
	left := b.N
	var next func([]byte, error)
	next = func(_ []byte, err error) {
		if left--; err != nil || left < 0 {
			done <- err
			return
		}
		if err := a.UnaryAsync(ctx, srv.InstanceID(), "echo64", payload, next); err != nil {
			done <- err
		}
	}
	b.ReportAllocs()
	b.ResetTimer()
	next(nil, nil)
	must(b, <-done)
}
