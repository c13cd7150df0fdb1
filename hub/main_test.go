package hub

import (
	"testing"

	"go.uber.org/goleak"
)

// TestMain fails the package when a test leaves a goroutine behind: every
// hub a test starts is shut down, and its listeners, loops and tasks must
// be joined by then.
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}
