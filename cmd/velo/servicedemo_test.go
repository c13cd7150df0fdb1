package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"strings"
	"testing"
	"time"
)

// TestDemoTwoProcesses runs the real demo: a second process registers the
// greeter service in a temporary folder, this one finds it by name and
// calls it, then stops it. Each answer must come from the other process,
// and the greeter must leave nothing behind.
func TestDemoTwoProcesses(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var out bytes.Buffer
	run, err := demo(ctx, &out)
	if err != nil {
		t.Fatalf("%v\noutput:\n%s", err, out.String())
	}
	if run.greeter.IsZero() {
		t.Fatalf("no instance found under the service name\n%s", out.String())
	}
	if len(run.answers) != len(demoNames) {
		t.Fatalf("got %d answers, want %d", len(run.answers), len(demoNames))
	}
	if run.greeterPID == os.Getpid() || run.greeterPID == 0 {
		t.Fatalf("greeter pid %d, this process %d", run.greeterPID, os.Getpid())
	}
	for i, a := range run.answers {
		if want := fmt.Sprintf("hello, %s, from the greeter (pid %d)", demoNames[i], run.greeterPID); a != want {
			t.Errorf("answer %d = %q, want %q (from the other process)", i, a, want)
		}
	}
	if run.leftOver != 0 {
		t.Errorf("%d greeter instances left after it stopped", run.leftOver)
	}
	if _, err := os.Stat(run.dir); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("the discovery folder %s is still there (%v)", run.dir, err)
	}
	if !strings.Contains(out.String(), "withdrew its service and peer entries and shut down") {
		t.Errorf("the greeter did not report its clean shutdown:\n%s", out.String())
	}
}

// TestGreeterStopsWhenParentGoes: the greeter ends when its stdin closes,
// as it does when the demo process dies, so no greeter outlives a demo.
func TestGreeterStopsWhenParentGoes(t *testing.T) {
	dir := t.TempDir()
	p, err := startGreeter(dir)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := p.ready(ctx); err != nil {
		t.Fatal(err)
	}
	// What the kernel does to the pipe when the parent dies.
	p.stdin.Close()
	select {
	case <-p.exited:
	case <-ctx.Done():
		p.cmd.Process.Kill()
		t.Fatal("the greeter did not end after its stdin closed")
	}
	for range p.lines {
	}
	if p.waitErr != nil {
		t.Fatalf("the greeter exited with %v", p.waitErr)
	}
}

func TestDemoRejectsArguments(t *testing.T) {
	if err := runDemo([]string{"extra"}); err == nil {
		t.Fatal("demo accepted a stray argument")
	}
}
