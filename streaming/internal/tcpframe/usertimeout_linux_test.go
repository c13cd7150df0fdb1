package tcpframe

import (
	"context"
	"net"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/velo-go/velo/internal/streamsock"
)

// The per-stream sockets carry TCP_USER_TIMEOUT on both ends, as the
// reference's do.
func TestStreamSocketsHaveAUserTimeout(t *testing.T) {
	ln, err := TCP{}.Listen("127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	accepted := make(chan net.Conn, 1)
	go func() {
		c, _ := ln.Accept()
		accepted <- c
	}()
	dialed, err := TCP{}.Dial(context.Background(), ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer dialed.Close()
	acc := <-accepted
	if acc == nil {
		t.Fatal("accept failed")
	}
	defer acc.Close()
	want := int(streamsock.UserTimeout.Milliseconds())
	for name, c := range map[string]net.Conn{"dialed": dialed, "accepted": acc} {
		raw, err := c.(*net.TCPConn).SyscallConn()
		if err != nil {
			t.Fatal(err)
		}
		var ms int
		var gerr error
		raw.Control(func(fd uintptr) { ms, gerr = unix.GetsockoptInt(int(fd), unix.IPPROTO_TCP, unix.TCP_USER_TIMEOUT) })
		if gerr != nil || ms != want {
			t.Errorf("%s socket: TCP_USER_TIMEOUT %d ms (%v), want %d", name, ms, gerr, want)
		}
	}
}
