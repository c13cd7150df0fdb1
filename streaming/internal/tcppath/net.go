package tcppath

import (
	"context"
	"crypto/tls"
	"fmt"
	"net"
	"net/netip"
	"syscall"

	"github.com/velo-go/velo/ext"
	"github.com/velo-go/velo/internal/streamsock"
	"github.com/velo-go/velo/transport/tcp"
)

// Net is how the path listens and dials: TCP unless a test sets another
// (an in-memory network, so that two nodes run inside a testing/synctest
// bubble, where a goroutine blocked on a real socket would keep the fake
// clock from moving).
type Net interface {
	Listen(addr string) (net.Listener, error)
	Dial(ctx context.Context, addr string) (net.Conn, error)
}

// TCP is the path's network outside tests.
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

// Listen opens the per-stream listener on addr and returns it with the
// entry that advertises it (under wire.TCPStreamKey, or TLSStreamKey over
// TLS): the format of the messenger TCP transport's entry, as the
// reference has it.
func Listen(sn Net, addr string) (net.Listener, []byte, error) {
	ln, err := sn.Listen(addr)
	if err != nil {
		return nil, nil, fmt.Errorf("velo: stream listener: %w", err)
	}
	ap, err := netip.ParseAddrPort(ln.Addr().String())
	if err != nil || ap.Addr().IsUnspecified() {
		// A wildcard address names no interface a peer could dial; the
		// messenger TCP transport lists the interfaces then, which is not
		// built here.
		ln.Close()
		return nil, nil, fmt.Errorf("velo: stream listener %s: listen on a specific address", ln.Addr())
	}
	ip := ap.Addr().Unmap()
	ep := tcp.EncodeEndpoint([]tcp.Interface{{IP: ip.String(), Port: ap.Port(), PrefixLen: uint8(ip.BitLen())}})
	return ln, ep, nil
}

// ListenerAddr is the address of the per-stream listener that an owner's
// PeerInfo advertises under key, or an error when it advertises none that
// this node can dial.
func ListenerAddr(info ext.PeerInfo, key string) (string, error) {
	ep, err := info.Address.Lookup(ext.TransportKey(key))
	if err != nil {
		return "", err
	}
	return tcp.DialAddr(ep)
}
