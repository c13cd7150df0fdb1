package main

import (
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
)

// noBenchOnPath is a PATH without velo-bench that still has go.
func noBenchOnPath(name string) (string, error) {
	if name == benchName {
		return "", exec.ErrNotFound
	}
	return exec.LookPath(name)
}

// writeScript writes an executable shell script to path.
func writeScript(t *testing.T, path, body string) {
	t.Helper()
	if runtime.GOOS == "windows" {
		t.Skip("the fake velo-bench is a shell script")
	}
	if err := os.WriteFile(path, []byte("#!/bin/sh\n"+body), 0o755); err != nil {
		t.Fatal(err)
	}
}

func writeGoMod(t *testing.T, dir, module string) {
	t.Helper()
	if err := os.WriteFile(filepath.Join(dir, "go.mod"), []byte("module "+module+"\n\ngo 1.26\n"), 0o644); err != nil {
		t.Fatal(err)
	}
}

func TestFindBenchPrefersTheOneBesideVelo(t *testing.T) {
	dir := t.TempDir()
	beside := filepath.Join(dir, benchName+exeSuffix())
	writeScript(t, beside, "exit 0\n")
	onPath := func(string) (string, error) { return "/somewhere/else/velo-bench", nil }
	if got := findBench(filepath.Join(dir, "velo"), onPath); got != beside {
		t.Fatalf("findBench = %q, want the one beside velo, %q", got, beside)
	}
	if got := findBench(filepath.Join(t.TempDir(), "velo"), onPath); got != "/somewhere/else/velo-bench" {
		t.Fatalf("with none beside velo, findBench = %q, want the one on PATH", got)
	}
	if got := findBench(filepath.Join(t.TempDir(), "velo"), noBenchOnPath); got != "" {
		t.Fatalf("with none anywhere, findBench = %q", got)
	}
}

// A folder named velo-bench beside velo (a clone's cmd/velo-bench, say)
// is not a binary.
func TestFindBenchSkipsAFolder(t *testing.T) {
	dir := t.TempDir()
	if err := os.Mkdir(filepath.Join(dir, benchName), 0o755); err != nil {
		t.Fatal(err)
	}
	if got := findBench(filepath.Join(dir, "velo"), noBenchOnPath); got != "" {
		t.Fatalf("findBench = %q, a folder", got)
	}
}

func TestModuleRoot(t *testing.T) {
	root := t.TempDir()
	writeGoMod(t, root, modulePath)
	deep := filepath.Join(root, "docs", "deeper")
	if err := os.MkdirAll(deep, 0o755); err != nil {
		t.Fatal(err)
	}
	if got := moduleRoot(deep); got != root {
		t.Errorf("moduleRoot(%s) = %q, want %q", deep, got, root)
	}
	other := filepath.Join(root, "other")
	if err := os.Mkdir(other, 0o755); err != nil {
		t.Fatal(err)
	}
	writeGoMod(t, other, "example.com/other")
	if got := moduleRoot(other); got != "" {
		t.Errorf("inside another module, moduleRoot = %q, want none", got)
	}
	if got := moduleName(strings.NewReader("// c\nmodule \"" + modulePath + "\"\n")); got != modulePath {
		t.Errorf("a quoted module path read as %q", got)
	}
}

// TestForwardKeepsExitStatusAndArgs: the arguments reach velo-bench as
// given, and its exit status is velo's.
func TestForwardKeepsExitStatusAndArgs(t *testing.T) {
	dir := t.TempDir()
	bin := filepath.Join(dir, benchName)
	argsFile := filepath.Join(dir, "args")
	writeScript(t, bin, `printf '%s\n' "$@" > "`+argsFile+"\"\nexit 3\n")
	err := runForwarded(exec.Command(bin, "bench", "ping-pong", "--reps", "1"))
	var code exitCode
	if !errors.As(err, &code) || code != 3 {
		t.Fatalf("runForwarded = %v, want exit status 3", err)
	}
	got, err := os.ReadFile(argsFile)
	if err != nil {
		t.Fatal(err)
	}
	if want := "bench\nping-pong\n--reps\n1\n"; string(got) != want {
		t.Fatalf("velo-bench got args %q, want %q", got, want)
	}
}

func TestLocateBenchOutsideTheModuleSaysHowToInstall(t *testing.T) {
	_, cleanup, err := locateBench(filepath.Join(t.TempDir(), "velo"), t.TempDir(), noBenchOnPath)
	defer cleanup()
	if !errors.Is(err, errNoBench) || !strings.Contains(err.Error(), "go install "+modulePath+"/cmd/velo-bench@latest") {
		t.Fatalf("locateBench = %v, want the install hint", err)
	}
}

// TestLocateBenchBuildsFromTheClone: with no velo-bench installed, inside
// a clone (here a stand-in module with the same path and a tiny
// cmd/velo-bench), velo builds it and runs it in the caller's folder, and
// its exit status survives (go run would have turned it into 1).
func TestLocateBenchBuildsFromTheClone(t *testing.T) {
	if _, err := exec.LookPath("go"); err != nil {
		t.Skip("no go command")
	}
	root := t.TempDir()
	writeGoMod(t, root, modulePath)
	src := filepath.Join(root, "cmd", "velo-bench")
	if err := os.MkdirAll(src, 0o755); err != nil {
		t.Fatal(err)
	}
	main := `package main

import "os"

func main() {
	wd, _ := os.Getwd()
	os.WriteFile("seen", []byte(wd+" "+os.Args[1]), 0o644)
	os.Exit(7)
}
`
	if err := os.WriteFile(filepath.Join(src, "main.go"), []byte(main), 0o644); err != nil {
		t.Fatal(err)
	}
	cwd := filepath.Join(root, "sub")
	if err := os.Mkdir(cwd, 0o755); err != nil {
		t.Fatal(err)
	}
	bin, cleanup, err := locateBench(filepath.Join(t.TempDir(), "velo"), cwd, noBenchOnPath)
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(bin, "ping-pong")
	cmd.Dir = cwd
	err = runForwarded(cmd)
	cleanup()
	var code exitCode
	if !errors.As(err, &code) || code != 7 {
		t.Fatalf("runForwarded = %v, want exit status 7", err)
	}
	seen, err := os.ReadFile(filepath.Join(cwd, "seen"))
	if err != nil {
		t.Fatalf("the built velo-bench did not run in the caller's folder: %v", err)
	}
	if want := cwd + " ping-pong"; string(seen) != want {
		t.Fatalf("velo-bench saw %q, want %q", seen, want)
	}
	if _, err := os.Stat(bin); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("the built binary %s outlived the run (%v)", bin, err)
	}
}
