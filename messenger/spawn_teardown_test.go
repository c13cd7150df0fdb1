package messenger

import (
	"context"
	"testing"
	"time"

	"github.com/velo-go/velo/ext"
)

// TestSpawnRequestAtTeardownIsRunOrRefused: a request submitted just as
// teardown begins is run or refused, never stranded with its in-flight
// guard held. Found by review: a parked worker may take the done branch of
// its select while submit hands it the request, and nobody else looks at
// the queue again. Each round parks a worker (the pool's park seam says
// when), closes done on another goroutine while a second request is
// submitted, and waits for the drain: a stranded guard keeps the drain
// open until the failure detector gives up.
func TestSpawnRequestAtTeardownIsRunOrRefused(t *testing.T) {
	const rounds = 500
	for i := 0; i < rounds; i++ {
		m := &Messenger{done: make(chan struct{}), maxRuns: DefaultMaxRunningHandlers}
		r := m.newRegistered(FireHandler("s", func(*Context) {}), false)
		parked := make(chan struct{}, 1)
		r.pool.onPark = func() {
			select {
			case parked <- struct{}{}:
			default:
			}
		}
		st := ext.NewShutdownState()
		g, _ := st.TryAcquire()
		r.dispatch(job{guard: g, hdr: requestHeader{rtype: FireAndForget}})
		select {
		case <-parked:
		case <-time.After(10 * time.Second):
			t.Fatalf("round %d: the worker never parked", i)
		}
		g2, _ := st.TryAcquire()
		st.BeginDrain() // WaitForDrain below hears the last release
		go func() {     // as teardown does: stopped, then done
			m.stopped.Store(true)
			close(m.done)
		}()
		r.dispatch(job{guard: g2, hdr: requestHeader{rtype: FireAndForget}})
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		err := st.WaitForDrain(ctx)
		cancel()
		if err != nil {
			t.Fatalf("round %d: a request submitted at teardown was neither run nor refused: %v", i, err)
		}
	}
}
