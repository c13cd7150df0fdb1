package main

import (
	"os"
	"strings"
	"testing"

	"go.uber.org/goleak"
)

// TestMain lets this test binary play the velo binary: the demo starts
// os.Executable() again as `demo --serve-greeter DIR`, which lands here
// and runs as the real greeter. The demo's nodes end with it.
func TestMain(m *testing.M) {
	if len(os.Args) > 1 && os.Args[1] == "demo" {
		main()
		os.Exit(0)
	}
	// Under -race a child would sleep a second at exit (atexit_sleep_ms).
	os.Setenv("GORACE", strings.TrimSpace(os.Getenv("GORACE")+" atexit_sleep_ms=0"))
	goleak.VerifyTestMain(m)
}
