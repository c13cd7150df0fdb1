package messenger_test

import (
	"context"
	"testing"

	"github.com/velo-go/velo"
)

// unaryRoundTripAllocs is the most allocations one unary round trip of a
// 64-byte payload may make, caller and server together, in one process over
// loopback TCP, without metrics. Measured on go1.26 (with and without
// -race): 4, and a profile (-memprofilerate=1) names them:
//
// caller:
//  1. request: the request header buffer;
//  2. onFrame: the copy of the reply payload that the caller keeps (the
//     read buffer goes back to its pool);
//
// server:
//  3. run: the handler Context, whose address the handler gets;
//  4. reply: the reply header buffer.
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

// TestUnaryAsyncRoundTripAllocs holds UnaryAsync to the same bound: the
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
	if allocs > unaryRoundTripAllocs {
		t.Errorf("allocations per asynchronous round trip: %v, want at most %d", allocs, unaryRoundTripAllocs)
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
