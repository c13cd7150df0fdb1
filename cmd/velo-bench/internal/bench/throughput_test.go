package bench

import (
	"sync"
	"testing"
)

// The raw windowed sender is a fair baseline only if it batches as velo's
// transport does: the first window leaves in one write, and no request
// ever goes in a write of its own while others could go with it.
func TestRawWindowCoalescesWrites(t *testing.T) {
	for _, kind := range []string{"tcp", "uds"} {
		t.Run(kind, func(t *testing.T) {
			c, s, cleanup, err := socketPair(kind)
			if err != nil {
				t.Fatal(err)
			}
			var wg sync.WaitGroup
			defer func() {
				cleanup()
				wg.Wait()
			}()
			const calls, window = 5000, 64
			res, err := rawEchoWindow(c, s, 64, 0, calls, window, &wg)
			if err != nil {
				t.Fatal(err)
			}
			if len(res.lat) != calls {
				t.Fatalf("%d latencies, want %d", len(res.lat), calls)
			}
			// The first write carries the whole window, so at most
			// calls-window+1 writes; a sender that wrote each request
			// alone would make calls of them.
			if res.writes > calls-window+1 || res.writes < calls/window {
				t.Fatalf("%d writes for %d requests in a window of %d", res.writes, calls, window)
			}
			t.Logf("%d writes for %d requests (%.1f per write)", res.writes, calls, float64(calls)/float64(res.writes))
		})
	}
}
