package streamsock

import (
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// UserTimeout is how long data a socket sent may stay unacknowledged before
// the kernel gives up on the connection (TCP_USER_TIMEOUT), as the
// reference sets it on its per-stream sockets. Without it a write to a host
// that vanished (powered off, cut off: nothing answers, not even a reset)
// retransmits for about a quarter of an hour before it fails; with it the
// connection fails after 30 s and the peer is reported lost. On kernels
// from 5.1 a peer that keeps its connection open but stops reading is
// bounded the same way (its zero-window probes count too).
const UserTimeout = 30 * time.Second

// SetUserTimeout sets TCP_USER_TIMEOUT on a TCP socket (Linux only: a no-op
// elsewhere). Accepted sockets inherit it from their listener.
func SetUserTimeout(c syscall.RawConn, d time.Duration) error {
	var serr error
	err := c.Control(func(fd uintptr) {
		serr = unix.SetsockoptInt(int(fd), unix.IPPROTO_TCP, unix.TCP_USER_TIMEOUT, int(d/time.Millisecond))
	})
	if err != nil {
		return err
	}
	return serr
}
