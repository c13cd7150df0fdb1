package main

import (
	"bytes"
	"fmt"
	"os/exec"
	"strings"
	"testing"

	"github.com/velo-go/velo/internal/embedded"
)

// runBinary runs velo-hub to its end and returns its exit status and
// what it wrote.
func runBinary(t *testing.T, args ...string) (int, string) {
	t.Helper()
	var out bytes.Buffer
	cmd := exec.Command(binary, args...)
	cmd.Stdout, cmd.Stderr = &out, &out
	err := cmd.Run()
	if ee, ok := err.(*exec.ExitError); ok {
		return ee.ExitCode(), out.String()
	} else if err != nil {
		t.Fatal(err)
	}
	return 0, out.String()
}

// TestBadConfigExits: a config velo-hub cannot use makes it exit non-zero
// before it binds anything, with a message that names what is wrong.
func TestBadConfigExits(t *testing.T) {
	for _, c := range []struct{ name, body, want string }{
		{"top-level typo", `{"heartbeat_intervl_ms": 100}`, `unknown field "heartbeat_intervl_ms"`},
		{"store typo", `{"store": {"kind": "etcd", "endpoint": ["127.0.0.1:2379"]}}`, `store: json: unknown field "endpoint"`},
		{"velo typo", `{"velo": {"listen": ":0"}}`, `velo: json: unknown field "listen"`},
		{"unknown kind", `{"store": {"kind": "consul"}}`, `unknown kind "consul"`},
		{"etcd without endpoints", `{"store": {"kind": "etcd"}}`, `needs endpoints`},
		{"zero timeout", `{"lock_timeout_ms": 0}`, `lock_timeout_ms must be positive`},
		{"not json", `{"public_addr": `, `unexpected EOF`},
	} {
		code, out := runBinary(t, "--config", writeConfig(t, c.body))
		if code == 0 || !strings.Contains(out, c.want) {
			t.Errorf("%s: exit %d, output %q; want non-zero naming %s", c.name, code, out, c.want)
		}
	}
}

func TestCommandLine(t *testing.T) {
	if code, out := runBinary(t); code != 2 || !strings.Contains(out, "--config is required") {
		t.Errorf("no flags: exit %d, %q", code, out)
	}
	if code, out := runBinary(t, "--config", "/nonexistent/hub.json"); code != 1 || !strings.Contains(out, "no such file") {
		t.Errorf("missing file: exit %d, %q", code, out)
	}
	good := writeConfig(t, `{"store": {"kind": "etcd", "endpoints": ["127.0.0.1:2379"]}}`)
	if code, out := runBinary(t, "--config", good, "--check"); code != 0 || !strings.Contains(out, "is valid (store etcd)") {
		t.Errorf("--check: exit %d, %q", code, out)
	}
	if code, out := runBinary(t, "--config", good, "--embedded-etcd", t.TempDir()); code != 1 || !strings.Contains(out, "leave store.endpoints out") {
		t.Errorf("--embedded-etcd with endpoints: exit %d, %q", code, out)
	}
	if code, out := runBinary(t, "--config", good, "--log-level", "loud"); code != 2 || !strings.Contains(out, "--log-level") {
		t.Errorf("bad level: exit %d, %q", code, out)
	}
}

// TestPrefixHeld: on an etcd another hub holds the prefix of, a second
// hub exits with a message that says how to wait; with wait_for_prefix
// it waits, and serves once the first stops (a clean stop frees the
// prefix at once).
func TestPrefixHeld(t *testing.T) {
	srv, err := embedded.StartEtcd(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Stop()
	config := func(wait bool) (string, []string) {
		a := freeAddrs(t, 3)
		return writeConfig(t, fmt.Sprintf(`{"public_addr": %q, "control_addr": %q, "velo": {"listen_addr": %q},
			"store": {"kind": "etcd", "endpoints": [%q], "wait_for_prefix": %v}}`, a[0], a[1], a[2], srv.Endpoint(), wait)), a
	}
	first, _ := config(false)
	p1, _ := startProc(t, "--config", first)

	second, addrs := config(false)
	code, out := runBinary(t, "--config", second)
	if code != 1 || !strings.Contains(out, "set store.wait_for_prefix to wait") {
		t.Errorf("second hub on a held prefix: exit %d, %q", code, out)
	}
	portsFree(t, addrs...)

	waiting, _ := config(true)
	p2 := startWaiting(t, "--config", waiting)
	p2.await(t, "velo-hub: the prefix is held by another hub; waiting for it (a crashed hub's lock expires within 10 s)")
	if code := p1.stop(t); code != 0 {
		t.Errorf("first hub exit %d", code)
	}
	p2.await(t, "velo-hub: serving")
	if code := p2.stop(t); code != 0 {
		t.Errorf("second hub exit %d", code)
	}
}
