package store_test

import (
	"testing"

	"go.uber.org/goleak"
)

// TestMain fails the package when a store's reaper outlives its Close.
func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }
