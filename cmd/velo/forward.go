package main

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"runtime"
	"strings"
)

// The heavy half of the command line lives in velo-bench (the benchmark
// harnesses, the embedded etcd and nats-server). velo runs it, in order of
// preference: a velo-bench beside this executable, one on PATH, or, inside
// a clone of this module, one built from the clone for this run.

const (
	benchName  = "velo-bench"
	modulePath = "github.com/velo-go/velo"
)

// errNoBench says where velo-bench comes from when velo cannot find one.
var errNoBench = errors.New("this command runs the velo-bench binary, which is not installed.\n" +
	"Install it with\n\n    go install " + modulePath + "/cmd/velo-bench@latest\n\n" +
	"or run it from a clone of the repository: go run ./cmd/velo-bench <args>")

// forwardToBench runs velo-bench with args (`bench ping-pong ...` or
// `demo --discovery etcd`), with this process's stdio, and returns its
// exit status as an exitCode.
func forwardToBench(args []string) error {
	exe, _ := os.Executable()
	cwd, err := os.Getwd()
	if err != nil {
		return err
	}
	bin, cleanup, err := locateBench(exe, cwd, exec.LookPath)
	if err != nil {
		return err
	}
	defer cleanup()
	return runForwarded(exec.Command(bin, args...))
}

// locateBench returns a velo-bench to run: beside exe, on PATH, or built
// from the clone of this module that holds cwd; cleanup removes a build.
func locateBench(exe, cwd string, lookPath func(string) (string, error)) (bin string, cleanup func(), err error) {
	cleanup = func() {}
	if bin = findBench(exe, lookPath); bin != "" {
		return bin, cleanup, nil
	}
	root := moduleRoot(cwd)
	if root == "" {
		return "", cleanup, errNoBench
	}
	tmp, err := os.MkdirTemp("", "velo-bench-*")
	if err != nil {
		return "", cleanup, err
	}
	cleanup = func() { os.RemoveAll(tmp) }
	if bin, err = buildBench(root, tmp, lookPath); err != nil {
		cleanup()
		return "", func() {}, err
	}
	return bin, cleanup, nil
}

// findBench returns the velo-bench beside exe, else the one on PATH, else "".
func findBench(exe string, lookPath func(string) (string, error)) string {
	if exe != "" {
		beside := filepath.Join(filepath.Dir(exe), benchName+exeSuffix())
		if st, err := os.Stat(beside); err == nil && st.Mode().IsRegular() {
			return beside
		}
	}
	if p, err := lookPath(benchName); err == nil {
		return p
	}
	return ""
}

// moduleRoot returns the folder of the go.mod nearest to dir (dir or a
// parent) when that go.mod is this module's, else "".
func moduleRoot(dir string) string {
	for {
		f, err := os.Open(filepath.Join(dir, "go.mod"))
		if err == nil {
			name := moduleName(f)
			f.Close()
			if name == modulePath {
				return dir
			}
			return ""
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return ""
		}
		dir = parent
	}
}

// moduleName reads the module path from a go.mod.
func moduleName(r io.Reader) string {
	sc := bufio.NewScanner(r)
	for sc.Scan() {
		if f := strings.Fields(sc.Text()); len(f) == 2 && f[0] == "module" {
			return strings.Trim(f[1], `"`+"`")
		}
	}
	return ""
}

// buildBench builds ./cmd/velo-bench of the module at root into dir. It
// builds and then runs the binary rather than `go run` it, because go run
// turns every failing exit status into 1, and it runs the binary in the
// caller's folder, so that relative paths (--cpuprofile, --plot) land
// where the caller asked.
func buildBench(root, dir string, lookPath func(string) (string, error)) (string, error) {
	goBin, err := lookPath("go")
	if err != nil {
		return "", fmt.Errorf("%w\n(found the velo source at %s, but no go command to build it)", errNoBench, root)
	}
	out := filepath.Join(dir, benchName+exeSuffix())
	fmt.Fprintf(os.Stderr, "velo: no %s installed; building it from %s (go build ./cmd/velo-bench):\n"+
		"velo: minutes the first time (etcd, nats-server, grpc-go, gonum), seconds once cached.\n"+
		"velo: `go install ./cmd/velo-bench` skips this step.\n", benchName, root)
	args := []string{"build", "-o", out}
	if buildTags != "" { // a velo built with -tags ucx builds a velo-bench with UCX
		args = append(args, "-tags", buildTags)
	}
	cmd := exec.Command(goBin, append(args, "./cmd/velo-bench")...)
	cmd.Dir = root
	cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
	if err := cmd.Run(); err != nil {
		return "", fmt.Errorf("building %s: %w", benchName, err)
	}
	return out, nil
}

// runForwarded runs cmd with this process's stdio and returns its exit
// status. An interrupt reaches the child from the terminal; velo waits
// for the child to finish with it rather than die first.
func runForwarded(cmd *exec.Cmd) error {
	cmd.Stdin, cmd.Stdout, cmd.Stderr = os.Stdin, os.Stdout, os.Stderr
	sigs := make(chan os.Signal, 1)
	signal.Notify(sigs, os.Interrupt)
	defer signal.Stop(sigs)
	err := cmd.Run()
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		if code := ee.ExitCode(); code > 0 {
			return exitCode(code)
		}
		return exitCode(1) // ended by a signal
	}
	return err
}

func exeSuffix() string {
	if runtime.GOOS == "windows" {
		return ".exe"
	}
	return ""
}
