package messenger

import (
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/velo-go/velo/internal/msgwire"
)

// The calls to a peer that shut down in order fail one grace after its
// answers stop coming, not one grace after the loss: a burst of answers
// still being read keeps them waiting (up to the cap), and a peer that
// answers nothing more fails them after a single grace.
func TestFailWhenQuietWaitsWhileAnswersCome(t *testing.T) {
	grace := msgwire.PeerShutdownGrace
	synctest.Test(t, func(t *testing.T) {
		var pending atomic.Int64
		pending.Store(10)
		failedAt := make(chan time.Duration, 1)
		start := time.Now()
		failWhenQuiet(func() int { return int(pending.Load()) }, func() { failedAt <- time.Since(start) })
		// One answer read every 30 ms, well under a grace apart, for 6.
		for range 6 {
			time.Sleep(30 * time.Millisecond)
			pending.Add(-1)
		}
		synctest.Wait()
		select {
		case d := <-failedAt:
			t.Fatalf("failed after %v while answers still came", d)
		default:
		}
		d := <-failedAt // the answers stopped at 180 ms
		if d < 180*time.Millisecond || d > 180*time.Millisecond+2*grace {
			t.Fatalf("failed %v after the loss, want within two graces of the last answer (180 ms)", d)
		}
	})
	synctest.Test(t, func(t *testing.T) {
		start := time.Now()
		done := make(chan time.Duration, 1)
		failWhenQuiet(func() int { return 3 }, func() { done <- time.Since(start) })
		if d := <-done; d != grace {
			t.Fatalf("a silent peer's calls failed after %v, want one grace (%v)", d, grace)
		}
	})
	synctest.Test(t, func(t *testing.T) {
		var pending atomic.Int64
		pending.Store(1 << 20)
		start := time.Now()
		done := make(chan time.Duration, 1)
		failWhenQuiet(func() int { return int(pending.Add(-1)) }, func() { done <- time.Since(start) })
		if d := <-done; d < shutdownAnswerCap || d > shutdownAnswerCap+grace {
			t.Fatalf("answers that never stop: failed after %v, want the cap (%v)", d, shutdownAnswerCap)
		}
	})
}
