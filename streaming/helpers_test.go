package streaming

import "testing"

// newTestManager returns a Manager that is closed when the test ends, so
// that its sweeper goroutine does not outlive the test (goleak).
func newTestManager(tb testing.TB, opts ...ManagerOption) *Manager {
	tb.Helper()
	m := NewManager(testOwner, opts...)
	tb.Cleanup(func() { m.Close() })
	return m
}
