package streamsock

import (
	"crypto/tls"
	"net"
	"syscall"
)

// Delayed acknowledgements on accepted TCP connections.
//
// Connections are one-directional: a node reads requests and replies on the
// connections it accepted and never writes data back on them. So the
// acknowledgements a reader's kernel owes cannot ride on data going the
// other way, as they do on a socket that carries a call and its answer.
// Linux then acknowledges each small frame with a segment of its own, sent
// when the read drains the socket (tcp_cleanup_rbuf: a connection that is
// not "bidirectional" acknowledges a small segment at once). On loopback
// that segment is processed inside the read system call, and a call's
// round trip pays two of them: the request's and the reply's (4 TCP
// segments per call against 2 for a socket pair).
//
// TCP_QUICKACK 0 puts the socket in the kernel's ping-pong mode, in which it
// delays acknowledgements: it then acknowledges every second small segment
// (or each full one), and a lone segment when its delayed-ack timer fires
// (tens of ms). The sender writes with TCP_NODELAY (Go's default, and the
// Rust implementation sets it), so a late acknowledgement holds back no
// data. The kernel leaves ping-pong mode when a delayed-ack timer fires on
// a connection that sent nothing, so the reader sets it again every
// ackRefreshReads reads.
const ackRefreshReads = 16

// ackDelayer keeps the socket of an accepted TCP connection that it sets
// TCP_QUICKACK 0 on. Its zero value (not TCP, not Linux) does nothing.
type ackDelayer struct {
	rc    syscall.RawConn
	reads uint32
}

// newAckDelayer returns the delayer for conn: a TCP connection, or TLS over
// one, on Linux.
func newAckDelayer(conn net.Conn) ackDelayer {
	if !delayAcksSupported {
		return ackDelayer{}
	}
	if tc, ok := conn.(*tls.Conn); ok {
		conn = tc.NetConn()
	}
	tc, ok := conn.(*net.TCPConn)
	if !ok {
		return ackDelayer{}
	}
	rc, err := tc.SyscallConn()
	if err != nil {
		return ackDelayer{}
	}
	return ackDelayer{rc: rc}
}

// read notes one read that returned data; every ackRefreshReads-th (the
// first included) sets ping-pong mode again.
func (a *ackDelayer) read() {
	if a.rc == nil {
		return
	}
	if a.reads%ackRefreshReads == 0 {
		a.rc.Control(setDelayAcks)
	}
	a.reads++
}
