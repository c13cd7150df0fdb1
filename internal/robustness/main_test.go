// Package robustness_test holds the faults a user meets, run against real
// nodes: a peer killed with calls in flight, a peer restarted at the same
// address, a shutdown under load, hostile connections, and the errors that
// must keep their identity across the wire. Each case asserts a bound.
//
// Some cases need a peer that can be killed for real (SIGKILL), so the
// test binary also runs as a server process: see runServer.
package robustness_test

import (
	"os"
	"testing"

	"go.uber.org/goleak"

	"github.com/velo-go/velo/internal/robustness/hostile"
)

func TestMain(m *testing.M) {
	if hostile.IsChild() { // a node process of the hostile-peer suite
		hostile.RunChild()
		return
	}
	if os.Getenv(serverEnv) != "" {
		runServer()
		return
	}
	if os.Getenv(streamChildEnv) != "" {
		runStreamChild()
		return
	}
	if os.Getenv(callerEnv) != "" {
		runCaller()
		return
	}
	goleak.VerifyTestMain(m)
}
