package messenger

import (
	"context"
	"runtime/debug"
	"testing"
	"time"

	"github.com/velo-go/velo/ext"
)

// TestPushToLaneStoppedAtTeardownIsRefused: once teardown stops an ordered
// lane, a request still pushed to it is refused with ErrShuttingDown and
// released. Found by review, when an ordered lane's Block policy made the
// reader wait in push across the teardown: stop left the dead lane in the
// map, so the next push found it again and recursed until the stack
// overflowed, killing the process. A push still meets a stopped lane when
// the reader looked the lane up just before teardown stopped it; this test
// makes that happen on purpose, with the old lane and through dispatch.
func TestPushToLaneStoppedAtTeardownIsRefused(t *testing.T) {
	defer debug.SetMaxStack(debug.SetMaxStack(16 << 20))
	m := &Messenger{done: make(chan struct{}), maxRuns: DefaultMaxRunningHandlers}
	ran := make(chan struct{}, 4)
	r := m.newRegistered(FireHandler("o", func(*Context) { ran <- struct{}{} }, WithOrdered()), false)
	st := ext.NewShutdownState()
	send := func(push func(job)) {
		g, ok := st.TryAcquire()
		if !ok {
			t.Fatal("the test's shutdown state refused a request")
		}
		push(job{guard: g, hdr: requestHeader{rtype: FireAndForget, id: ResponseID{Lo: 7}}})
	}
	send(r.dispatch)
	select {
	case <-ran:
	case <-time.After(10 * time.Second):
		t.Fatal("the first request never ran")
	}
	l := r.lane(7)
	close(m.done)
	l.stop() // as the lane's goroutine does when it sees done
	r.lanesMu.Lock()
	stale := r.lanes[7] == l
	r.lanesMu.Unlock()
	if stale {
		t.Fatal("a lane stopped at teardown is still in the lane map")
	}
	send(l.push)     // the reader holds the old lane
	send(r.dispatch) // or looks it up again
	st.BeginDrain()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := st.WaitForDrain(ctx); err != nil {
		t.Fatalf("requests pushed to a stopped lane were not released: %v", err)
	}
	if len(ran) != 0 {
		t.Fatal("a request pushed after teardown ran")
	}
}
