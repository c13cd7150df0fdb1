package main

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"testing"
	"time"
)

// hubProc is a velo-hub process whose stderr carries JSON log lines.
type hubProc struct {
	cmd   *exec.Cmd
	lines chan map[string]any
	done  chan struct{} // closed once the process was waited for
	err   error         // of Wait, set before done closes
}

// startProc runs velo-hub with args and --log-format json, and waits for
// its "serving" line, which it returns.
func startProc(t *testing.T, args ...string) (*hubProc, map[string]any) {
	t.Helper()
	p := startWaiting(t, args...)
	return p, p.await(t, "velo-hub: serving")
}

// startWaiting starts velo-hub and returns at once.
func startWaiting(t *testing.T, args ...string) *hubProc {
	t.Helper()
	p := &hubProc{lines: make(chan map[string]any, 64), done: make(chan struct{})}
	p.cmd = exec.Command(binary, append(args, "--log-format", "json", "--log-level", "debug")...)
	stderr, err := p.cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := p.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() {
		sc := bufio.NewScanner(stderr)
		for sc.Scan() {
			var m map[string]any
			if json.Unmarshal(sc.Bytes(), &m) != nil {
				m = map[string]any{"msg": sc.Text()}
			}
			p.lines <- m
		}
		close(p.lines)
		p.err = p.cmd.Wait()
		close(p.done)
	}()
	t.Cleanup(func() {
		select {
		case <-p.done:
		default:
			p.cmd.Process.Kill()
			<-p.done
		}
	})
	return p
}

// await returns the next log line whose msg is msg.
func (p *hubProc) await(t *testing.T, msg string) map[string]any {
	t.Helper()
	timeout := time.After(90 * time.Second)
	for {
		select {
		case m, ok := <-p.lines:
			if !ok {
				t.Fatalf("velo-hub ended before logging %q: %v", msg, p.wait())
			}
			if m["msg"] == msg {
				return m
			}
		case <-timeout:
			t.Fatalf("velo-hub did not log %q", msg)
		}
	}
}

// stop sends SIGTERM and returns the exit status.
func (p *hubProc) stop(t *testing.T) int {
	t.Helper()
	if err := p.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	go func() {
		for range p.lines { // drain, so the process never blocks on stderr
		}
	}()
	select {
	case <-p.done:
		err := p.err
		var ee *exec.ExitError
		if errors.As(err, &ee) {
			return ee.ExitCode()
		}
		if err != nil {
			t.Fatal(err)
		}
		return 0
	case <-time.After(90 * time.Second):
		t.Fatal("velo-hub did not stop after SIGTERM")
	}
	return -1
}

// freeAddrs returns n loopback addresses whose ports were free a moment
// ago.
func freeAddrs(t *testing.T, n int) []string {
	t.Helper()
	var out []string
	for range n {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, ln.Addr().String())
		defer ln.Close()
	}
	return out
}

// portsFree fails the test unless every address can be bound again.
func portsFree(t *testing.T, addrs ...string) {
	t.Helper()
	for _, a := range addrs {
		ln, err := net.Listen("tcp", a)
		if err != nil {
			t.Errorf("port %s still taken after the hub exited: %v", a, err)
			continue
		}
		ln.Close()
	}
}

func writeConfig(t *testing.T, body string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "hub.json")
	if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

func hubJSON(pub, ctl, veloAddr string, intervalMS int) string {
	return fmt.Sprintf(`{"public_addr": %q, "control_addr": %q, "heartbeat_interval_ms": %d, "heartbeat_max_failures": 2,
		"shutdown_timeout_ms": 3000, "velo": {"listen_addr": %q}}`, pub, ctl, intervalMS, veloAddr)
}

func (p *hubProc) wait() error { <-p.done; return p.err }
