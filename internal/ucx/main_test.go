package ucx

import (
	"os"
	"testing"

	"go.uber.org/goleak"
)

// childRole, when a test file sets it, runs this binary as a child process
// of a test (chosen by an environment variable) and reports whether it
// did; the child exits without running the tests.
var childRole func() bool

func TestMain(m *testing.M) {
	if childRole != nil && childRole() {
		os.Exit(0)
	}
	goleak.VerifyTestMain(m)
}
