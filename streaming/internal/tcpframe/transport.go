// Package tcpframe is the TCP frame transport of the per-stream path
// (keys "tcp-stream" and, over TLS, "tls-stream"): one connection per
// stream, opened with a 16-byte preamble (the route: anchor local id,
// routing session, big-endian), then the stream's frames as messenger
// frames with an empty header, as the Rust reference's
// tcp_transport.rs writes them.
//
// The consumer closes the connection to cancel and writes nothing on it;
// the producer closes it after its terminal frame. Both ends set
// TCP_USER_TIMEOUT (see Net).
package tcpframe

import (
	"context"
	"crypto/tls"
	"fmt"
	"net/netip"

	"github.com/velo-go/velo/ext"
	wire "github.com/velo-go/velo/internal/streamwire"
	"github.com/velo-go/velo/transport/tcp"
)

// Transport is the TCP frame transport. Its zero value is not usable:
// build it with New.
type Transport struct {
	net Net
	key ext.TransportKey
}

// New returns the transport over n: plain TCP (key "tcp-stream") when
// cfg is nil, TLS with cfg for both ends otherwise (key "tls-stream"; see
// TLS). A nil n is TCP.
func New(n Net, cfg *tls.Config) *Transport {
	if n == nil {
		n = TCP{}
	}
	if cfg != nil {
		return &Transport{net: TLS{Net: n, Config: cfg.Clone()}, key: wire.TLSStreamKey}
	}
	return &Transport{net: n, key: wire.TCPStreamKey}
}

// Key is "tcp-stream", or "tls-stream" over TLS.
func (t *Transport) Key() ext.TransportKey { return t.key }

// MaxFrameSize is the per-stream codec's limit, 16 MiB.
func (t *Transport) MaxFrameSize() int { return wire.MaxTCPFrame }

// Listen opens the listener on addr and advertises it in the format of
// the messenger TCP transport's entry, as the reference does. addr must
// name a specific interface: a wildcard names none a peer could dial.
func (t *Transport) Listen(addr string) (ext.FrameListener, error) {
	ln, err := t.net.Listen(addr)
	if err != nil {
		return nil, fmt.Errorf("velo: stream listener: %w", err)
	}
	ap, err := netip.ParseAddrPort(ln.Addr().String())
	if err != nil || ap.Addr().IsUnspecified() {
		ln.Close()
		return nil, fmt.Errorf("velo: stream listener %s: listen on a specific address", ln.Addr())
	}
	ip := ap.Addr().Unmap()
	ep := tcp.EncodeEndpoint([]tcp.Interface{{IP: ip.String(), Port: ap.Port(), PrefixLen: uint8(ip.BitLen())}})
	return &listener{ln: ln, entry: ep, conns: make(map[*inbound]struct{})}, nil
}

// Dial connects to the listener entry advertises and writes route's
// preamble. ctx bounds the dial, the TLS handshake and the preamble's
// write.
func (t *Transport) Dial(ctx context.Context, entry []byte, route ext.StreamRoute) (ext.FrameSender, error) {
	addr, err := tcp.DialAddr(entry)
	if err != nil {
		return nil, err
	}
	conn, err := t.net.Dial(ctx, addr)
	if err != nil {
		return nil, fmt.Errorf("dial %s: %w", addr, err)
	}
	pre := wire.TCPPreamble{AnchorID: route.AnchorID, SessionID: route.SessionID}.Append(make([]byte, 0, wire.TCPPreambleLen))
	d, _ := ctx.Deadline()
	conn.SetWriteDeadline(d)
	if _, err := conn.Write(pre); err != nil {
		conn.Close()
		return nil, fmt.Errorf("write preamble: %w", err)
	}
	conn.SetWriteDeadline(timeZero)
	return newSender(conn), nil
}
