package deadline

import (
	"runtime"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// sweepers counts the goroutines that newQueue started for a sweeper,
// started or not yet running. Counting all goroutines instead was
// fragile: one left by an earlier test could end between two counts.
func sweepers() int {
	buf := make([]byte, 1<<20)
	for {
		n := runtime.Stack(buf, true)
		if n < len(buf) {
			return strings.Count(string(buf[:n]), "created by github.com/velo-go/velo/internal/deadline.newQueue")
		}
		buf = make([]byte, 2*len(buf))
	}
}

// sweepersGone waits until no sweeper goroutine is left: Close returns
// once the sweeper is done, but its goroutine may still be on its way out.
func sweepersGone(t *testing.T) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for sweepers() != 0 {
		if time.Now().After(deadline) {
			t.Fatalf("%d sweeper goroutines left after Close", sweepers())
		}
		runtime.Gosched()
	}
}
