package streaming

import (
	"fmt"
	"os"
	"runtime/debug"
	"sync"
	"testing"

	"github.com/velo-go/velo/streaming/internal/mux"
	"go.uber.org/goleak"
)

// illegalMoves records every illegal lifecycle move the tests made; any
// fails the run. A panic would do it sooner, but it would come with the
// batcher's lock held and hang the test instead of failing it.
var illegalMoves struct {
	mu   sync.Mutex
	list []string
}

func TestMain(m *testing.M) {
	mux.OnIllegalTransition = func(kind, from, to string) {
		illegalMoves.mu.Lock()
		defer illegalMoves.mu.Unlock()
		illegalMoves.list = append(illegalMoves.list, fmt.Sprintf("illegal %s lifecycle move %s -> %s\n%s", kind, from, to, debug.Stack()))
	}
	goleak.VerifyTestMain(m, goleak.Cleanup(func(code int) {
		illegalMoves.mu.Lock()
		for _, s := range illegalMoves.list {
			fmt.Fprintln(os.Stderr, s)
			code = 1
		}
		illegalMoves.mu.Unlock()
		os.Exit(code)
	}))
}
