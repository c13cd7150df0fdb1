package tcpframe

import (
	"context"
	"crypto/tls"
	"net"
	"syscall"

	"github.com/velo-go/velo/internal/streamsock"
)

// Net is how the transport listens and dials: TCP unless a test sets another
// (an in-memory network, so that two nodes run inside a testing/synctest
// bubble, where a goroutine blocked on a real socket would keep the fake
// clock from moving).
type Net interface {
	Listen(addr string) (net.Listener, error)
	Dial(ctx context.Context, addr string) (net.Conn, error)
}

// TCP is the transport's network outside tests.
type TCP struct{}

// Both ends set TCP_USER_TIMEOUT (streamsock.UserTimeout, on Linux), as the
// reference does on its per-stream sockets: a stream to a host that
// vanished fails within 30 s instead of retransmitting for minutes.
func (TCP) Listen(addr string) (net.Listener, error) {
	lc := net.ListenConfig{Control: userTimeout}
	return lc.Listen(context.Background(), "tcp", addr)
}

func (TCP) Dial(ctx context.Context, addr string) (net.Conn, error) {
	d := net.Dialer{Control: userTimeout}
	return d.DialContext(ctx, "tcp", addr)
}

func userTimeout(_, _ string, c syscall.RawConn) error {
	return streamsock.SetUserTimeout(c, streamsock.UserTimeout)
}

// TLS runs the connections of a Net under TLS with one config for both
// ends, as the TCP messenger transport built WithTLS does: its listener
// serves with Config, and each connection handshakes on its first read
// (which the preamble's deadline bounds); Dial handshakes before it
// returns, bounded by its context, with a copy of Config whose empty
// ServerName becomes the dialed host. A dial refused on trust matches
// ext.ErrPeerUntrusted.
type TLS struct {
	Net    Net
	Config *tls.Config
}

func (t TLS) Listen(addr string) (net.Listener, error) {
	ln, err := t.Net.Listen(addr)
	if err != nil {
		return nil, err
	}
	return tls.NewListener(ln, t.Config), nil
}

func (t TLS) Dial(ctx context.Context, addr string) (net.Conn, error) {
	conn, err := t.Net.Dial(ctx, addr)
	if err != nil {
		return nil, err
	}
	return streamsock.ClientHandshake(ctx, conn, t.Config, addr, 0)
}
