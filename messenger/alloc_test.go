package messenger_test

import (
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
