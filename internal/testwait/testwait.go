// Package testwait is the one polling wait of the streaming packages'
// tests: for a condition that no signal announces, such as a counter the
// code under test moves on another goroutine.
package testwait

import (
	"runtime"
	"testing"
	"time"
)

// Bound is how long Until waits before it fails the test: far above any
// wait a passing test makes on a loaded 2-core machine under -race.
const Bound = 10 * time.Second

// Until yields the processor until cond holds, and fails t after Bound
// naming what it waited for.
func Until(t testing.TB, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(Bound)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		runtime.Gosched()
	}
}
