package main

import (
	"bufio"
	"fmt"
	"net"
	"strings"
	"syscall"
	"testing"
	"time"
)

// TestSecondSignalExitsAtOnce: a request that holds the control listener
// (a body promised and not sent) keeps the orderly stop waiting for
// shutdown_timeout_ms; a second SIGTERM ends the process then, with
// status 1.
func TestSecondSignalExitsAtOnce(t *testing.T) {
	a := freeAddrs(t, 3)
	p, _ := startProc(t, "--config", writeConfig(t, fmt.Sprintf(
		`{"public_addr": %q, "control_addr": %q, "shutdown_timeout_ms": 600000, "velo": {"listen_addr": %q}}`, a[0], a[1], a[2])))
	conn, err := net.Dial("tcp", a[1])
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	// Expect: 100-continue makes the hub say when its handler starts to
	// read the body: only then is the request in flight for certain (one
	// still in the listen backlog at the signal is dropped with the
	// listener, and the stop does not wait for it).
	if _, err := fmt.Fprint(conn, "POST /v1/instances HTTP/1.1\r\nHost: hub\r\nContent-Length: 1000\r\nExpect: 100-continue\r\n\r\n"); err != nil {
		t.Fatal(err)
	}
	conn.SetReadDeadline(time.Now().Add(30 * time.Second))
	line, err := bufio.NewReader(conn).ReadString('\n')
	if err != nil || !strings.Contains(line, "100 Continue") {
		t.Fatalf("the hub answered %q (%v), want 100 Continue", line, err)
	}
	if _, err := fmt.Fprint(conn, "{"); err != nil {
		t.Fatal(err)
	}
	if err := p.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	p.await(t, "velo-hub: stopping (a second signal exits at once)")
	if code := p.stop(t); code != 1 {
		t.Fatalf("exit %d after the second signal, want 1", code)
	}
}
