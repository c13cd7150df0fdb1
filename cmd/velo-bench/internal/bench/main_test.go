package bench

import (
	"os"
	"testing"

	"go.uber.org/goleak"
)

// Every harness starts nodes, servers and goroutines of its own; a run that
// leaves any behind would skew the next arm's figures. Started with
// rpChildEnv set, the test binary is a child of a --procs run instead
// (responseplane_procs_test.go); with rvChildEnv, a child of a --procs
// rendezvous run (rvprocs.go).
func TestMain(m *testing.M) {
	if args := os.Getenv(rpChildEnv); args != "" {
		os.Exit(runRPTestChild(args))
	}
	if role := os.Getenv(rvChildEnv); role != "" {
		if err := RendezvousChild(role, os.Stdin, os.Stdout); err != nil {
			os.Stderr.WriteString(err.Error() + "\n")
			os.Exit(1)
		}
		os.Exit(0)
	}
	goleak.VerifyTestMain(m)
}
