package ext_test

import (
	"runtime"
	"testing"
	"time"
)

// failAfter bounds every wait in these tests. It is a failure detector, not
// a schedule: a correct run never comes near it.
const failAfter = 20 * time.Second

// waitUntil polls cond, yielding between polls, until it holds. It fails the
// test if cond never holds within failAfter: a hang becomes a clear failure.
func waitUntil(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(failAfter)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting until %s", what)
		}
		runtime.Gosched()
	}
}

// recv waits for ch to yield a value, failing the test after failAfter.
func recv[T any](t *testing.T, what string, ch <-chan T) T {
	t.Helper()
	select {
	case v := <-ch:
		return v
	case <-time.After(failAfter):
		t.Fatalf("timed out waiting for %s", what)
		panic("unreachable")
	}
}

// closedNow reports whether ch is closed (or has a value) at this moment.
func closedNow[T any](ch <-chan T) bool {
	select {
	case <-ch:
		return true
	default:
		return false
	}
}
