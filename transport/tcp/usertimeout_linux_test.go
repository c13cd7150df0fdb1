package tcp

import (
	"context"
	"net"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/velo-go/velo/internal/streamsock"
)

// userTimeoutOf reads TCP_USER_TIMEOUT off a connection.
func userTimeoutOf(t *testing.T, c net.Conn) time.Duration {
	t.Helper()
	raw, err := c.(*net.TCPConn).SyscallConn()
	if err != nil {
		t.Fatal(err)
	}
	var ms int
	var gerr error
	if err := raw.Control(func(fd uintptr) {
		ms, gerr = unix.GetsockoptInt(int(fd), unix.IPPROTO_TCP, unix.TCP_USER_TIMEOUT)
	}); err != nil || gerr != nil {
		t.Fatal(err, gerr)
	}
	return time.Duration(ms) * time.Millisecond
}

// Dialed and accepted sockets both carry TCP_USER_TIMEOUT, so a lane to a
// host that vanished fails within streamsock.UserTimeout rather than
// retransmitting for minutes; the accepted one inherits it from the
// listener.
func TestSocketsHaveAUserTimeout(t *testing.T) {
	n := &network{o: options{listen: "127.0.0.1:0", buffers: DefaultSocketBuffer}}
	ln, ep, err := n.Listen(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	accepted := make(chan net.Conn, 1)
	go func() {
		c, _ := ln.Accept()
		accepted <- c
	}()
	dialed, err := n.Dial(context.Background(), ep)
	if err != nil {
		t.Fatal(err)
	}
	defer dialed.Close()
	acc := <-accepted
	if acc == nil {
		t.Fatal("accept failed")
	}
	defer acc.Close()
	for name, c := range map[string]net.Conn{"dialed": dialed, "accepted": acc} {
		if got := userTimeoutOf(t, c); got != streamsock.UserTimeout {
			t.Errorf("%s socket: TCP_USER_TIMEOUT %v, want %v", name, got, streamsock.UserTimeout)
		}
	}
}
