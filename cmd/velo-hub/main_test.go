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
// user does, in its own process.
var binary string

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "velo-hub-bin-*")
	if err != nil {
		panic(err)
	}
	binary = filepath.Join(dir, "velo-hub")
	// The packages are already compiled for this test binary, so this
	// only links.
	if out, err := exec.Command("go", "build", "-o", binary, ".").CombinedOutput(); err != nil {
		fmt.Fprintf(os.Stderr, "go build velo-hub: %v\n%s", err, out)
		os.RemoveAll(dir)
		os.Exit(1)
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
