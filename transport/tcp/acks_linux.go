package tcp

import (
	"io"
	"net"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// ACK tuning of accepted connections.
//
// A connection carries data one way only, so the receiver's ACKs can never
// ride on data of its own. For small messages Linux sends a bare ACK for
// about every second read, and on loopback the sender's kernel handles it
// inside the sender's next system call: a ping-pong of 64 B requests moves
// four segments per round trip instead of the two of a socket used both
// ways. While reads stay small, the reader puts the socket in Linux's
// delayed-ACK mode (TCP_QUICKACK=0); that cut a 64 B round trip by about
// 10% here. Bulk traffic wants its ACKs at once (the same mode cost a
// quarter of the pipelined throughput), so a large read turns the mode off
// again. The kernel also leaves the mode by itself when its delayed-ACK
// timer fires after an idle spell, so the mode is set again, at most once
// per renewAcks, after a small read.
const (
	smallRead = 2 << 10  // reads up to this size are interactive traffic
	largeRead = 16 << 10 // reads from this size on are bulk traffic
	renewAcks = 10 * time.Millisecond
)

type ackTuner struct {
	conn    net.Conn
	rc      syscall.RawConn
	delayed bool          // this reader last put the socket in delayed-ACK mode
	renew   time.Duration // when to set the mode again after a small read
}

// Inbound reads an accepted TCP connection through an ackTuner.
func (n *network) Inbound(conn net.Conn) io.Reader {
	if n.o.quickAcks {
		return conn
	}
	tc, ok := conn.(*net.TCPConn)
	if !ok {
		return conn
	}
	rc, err := tc.SyscallConn()
	if err != nil {
		return conn
	}
	return &ackTuner{conn: conn, rc: rc}
}

func (a *ackTuner) Read(p []byte) (int, error) {
	n, err := a.conn.Read(p)
	switch {
	case n <= 0:
	case n <= smallRead:
		if now := time.Duration(nanotime()); !a.delayed || now >= a.renew {
			a.renew = now + renewAcks
			a.set(true)
		}
	case n >= largeRead && a.delayed:
		a.set(false)
	}
	return n, err
}

// set turns delayed ACKs on or off. A failure only loses the tuning.
func (a *ackTuner) set(delayed bool) {
	a.delayed = delayed
	quick := 1
	if delayed {
		quick = 0
	}
	a.rc.Control(func(fd uintptr) {
		unix.SetsockoptInt(int(fd), unix.IPPROTO_TCP, unix.TCP_QUICKACK, quick)
	})
}

var epoch = time.Now()

// nanotime is a monotonic clock reading.
func nanotime() int64 { return int64(time.Since(epoch)) }
