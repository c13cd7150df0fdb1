package streaming

import (
	"testing"
	"time"
)

// newTestManager returns a Manager that is closed when the test ends, so
// that its sweeper goroutine does not outlive the test (goleak).
func newTestManager(tb testing.TB, opts ...ManagerOption) *Manager {
	tb.Helper()
	m := NewManager(testOwner, opts...)
	tb.Cleanup(func() { m.Close() })
	return m
}

// retiredOutcome waits (bounded) for a Retired channel to close and
// returns the sender's outcome.
func retiredOutcome(t testing.TB, r <-chan struct{}, s interface{ Outcome() RetireOutcome }) RetireOutcome {
	t.Helper()
	select {
	case <-r:
	case <-time.After(10 * time.Second):
		t.Fatal("Retired did not close within 10 s")
	}
	return s.Outcome()
}
