package main

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"go.uber.org/goleak"
)

// binary is velo-hub built for this test run; the tests run it as a
// user does, in its own process. worker and caller are the examples of
// the walk-through in docs/hub.md.
var binary, worker, caller string

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "velo-hub-bin-*")
	if err != nil {
		panic(err)
	}
	binary = filepath.Join(dir, "velo-hub")
	worker = filepath.Join(dir, "hub-worker")
	caller = filepath.Join(dir, "hub-caller")
	// The packages are already compiled for this test binary, so these
	// mostly link.
	for out, pkg := range map[string]string{binary: ".", worker: "../../examples/hub-worker", caller: "../../examples/hub-caller"} {
		if msg, err := exec.Command("go", "build", "-o", out, pkg).CombinedOutput(); err != nil {
			fmt.Fprintf(os.Stderr, "go build %s: %v\n%s", pkg, err, msg)
			os.RemoveAll(dir)
			os.Exit(1)
		}
	}
	code := m.Run()
	os.RemoveAll(dir)
	if code == 0 {
		if err := goleak.Find(); err != nil {
			fmt.Fprintln(os.Stderr, "goleak:", err)
			code = 1
		}
	}
	os.Exit(code)
}
