package main

import (
	"fmt"
	"net"
	"syscall"
	"testing"
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
	if _, err := fmt.Fprint(conn, "POST /v1/instances HTTP/1.1\r\nHost: hub\r\nContent-Length: 1000\r\n\r\n{"); err != nil {
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
