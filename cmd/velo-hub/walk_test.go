package main

import (
	"bufio"
	"context"
	"io"
	"net/http"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/velo-go/velo/ext"
	"github.com/velo-go/velo/hub/protocol"
)

// lineProc is an example program whose stdout lines the test reads.
type lineProc struct {
	name  string
	cmd   *exec.Cmd
	lines chan string
	done  chan struct{} // closed once the process was waited for
	err   error         // of Wait, set before done closes
}

func startLines(t *testing.T, name, bin string, args ...string) *lineProc {
	t.Helper()
	p := &lineProc{name: name, cmd: exec.Command(bin, args...), lines: make(chan string, 1024), done: make(chan struct{})}
	p.cmd.Stderr = os.Stderr
	out, err := p.cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := p.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() {
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			select {
			case p.lines <- sc.Text():
			default: // the test stopped reading; drop
			}
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

// next returns the next line that starts with prefix.
func (p *lineProc) next(t *testing.T, prefix string) string {
	t.Helper()
	timeout := time.After(60 * time.Second)
	for {
		select {
		case l, ok := <-p.lines:
			if !ok {
				t.Fatalf("%s ended before printing %q: %v", p.name, prefix, p.wait())
			}
			if strings.HasPrefix(l, prefix) {
				return l
			}
		case <-timeout:
			t.Fatalf("%s did not print %q", p.name, prefix)
		}
	}
}

// TestWalkThrough is the walk-through of docs/hub.md in processes: velo-hub
// on an embedded etcd, examples/hub-worker serving "greeter" and
// examples/hub-caller calling it by name. SIGKILL the worker: the caller
// gets errors it can match (unreachable, then no-instance) and never
// hangs past its deadline, and the hub drops the worker once its probes
// fail.
func TestWalkThrough(t *testing.T) {
	addrs := freeAddrs(t, 3)
	pub, ctl := "http://"+addrs[0], "http://"+addrs[1]
	cfg := writeConfig(t, hubJSON(addrs[0], addrs[1], addrs[2], 300))
	hub, _ := startProc(t, "--config", cfg, "--embedded-etcd", t.TempDir())

	w := startLines(t, "hub-worker", worker, "--hub", ctl)
	id, err := ext.ParseInstanceID(strings.TrimPrefix(w.next(t, "ready "), "ready "))
	if err != nil {
		t.Fatal(err)
	}
	c := startLines(t, "hub-caller", caller, "--hub", ctl, "--every", "50ms", "--timeout", "5s")
	if l := c.next(t, "ok "); !strings.Contains(l, id.String()) {
		t.Fatalf("caller: %q, want the worker's answer", l)
	}

	killed := time.Now()
	if err := w.cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	// Every line after the kill is an answer that was already on its way,
	// or an error of a kind the caller's errors.Is tests name; the caller
	// settles on no-instance.
	for {
		l := c.next(t, "")
		if strings.HasPrefix(l, "error other") || strings.HasPrefix(l, "error timeout") {
			t.Fatalf("caller after the kill: %q", l)
		}
		if strings.HasPrefix(l, "error no-instance") {
			break
		}
	}
	for peerKnown(t, pub, id) {
		if time.Since(killed) > time.Minute {
			t.Fatal("the hub still lists the killed worker after a minute")
		}
		time.Sleep(50 * time.Millisecond)
	}
	t.Logf("the hub dropped the killed worker %v after SIGKILL (probes every 300 ms, 2 failures)",
		time.Since(killed).Round(time.Millisecond))
	if l := c.next(t, "error "); !strings.HasPrefix(l, "error no-instance") {
		t.Fatalf("caller once the hub dropped the worker: %q", l)
	}

	if err := c.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	for range c.lines {
	}
	if err := c.wait(); err != nil {
		t.Errorf("caller after SIGTERM: %v", err)
	}
	if code := hub.stop(t); code != 0 {
		t.Errorf("velo-hub exit %d", code)
	}
}

// peerKnown asks the hub's public listener for the instance.
func peerKnown(t *testing.T, pub string, id ext.InstanceID) bool {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, pub+protocol.PeerByInstancePath(id), nil)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	io.Copy(io.Discard, resp.Body)
	switch resp.StatusCode {
	case http.StatusOK:
		return true
	case http.StatusNotFound:
		return false
	}
	t.Fatalf("peer lookup: %s", resp.Status)
	return false
}

func (p *lineProc) wait() error { <-p.done; return p.err }
