package ext_test

import (
	"testing"

	"go.uber.org/goleak"
)

// TestMain fails the package when a test leaves a goroutine behind: the
// queue, gate and drain tests start producers and consumers, and each must be
// joined before its test returns.
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}
