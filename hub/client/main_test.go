package client_test

import (
	"testing"

	"go.uber.org/goleak"
)

// TestMain fails the package when a test leaves a goroutine behind: each
// client's loop and watch streams must end at its last Close.
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}
