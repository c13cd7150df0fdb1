// Package tcp is the TCP messenger transport.
//
// Connections are one-directional and one per (peer, lane), dialed on the
// first send. Small frames are coalesced into one write; frames over 64 KiB
// are written in place. Socket buffers are sized on the listening socket
// before it listens and on a dialing socket before it connects, so the
// kernel never shrinks a window that is already open (see docs/transports.md).
//
// WithTLS runs every connection over TLS, mutual TLS as an option, under
// the address key TLSKey ("tls"); WithPeerAuthorizer refuses peers at the
// handshake, and a handler reads the caller's certificate with
// velo.Context.PeerTLS.
package tcp

// The Transport type, its methods, Stats and the options shared with the
// other socket transport are generated from one template.
//go:generate go run ../../internal/streamsock/genfront tcp

import (
	"context"
	"crypto/tls"
	"fmt"
	"net"
	"net/netip"
	"syscall"

	"github.com/velo-go/velo/ext"
	"github.com/velo-go/velo/internal/streamsock"
)

// Key is the address key of the TCP transport.
const Key ext.TransportKey = "tcp"

// DefaultSocketBuffer is the SO_SNDBUF/SO_RCVBUF size set unless
// WithKernelBuffers is given.
const DefaultSocketBuffer = 2 << 20

// Option configures the transport.
type Option func(*options)

type options struct {
	listen      string
	advertise   string
	buffers     int
	cfg         streamsock.Config
	prioritySet bool

	tls       *tls.Config                     // WithTLS: the user's config, as given
	authorize func(tls.ConnectionState) error // WithPeerAuthorizer
}

// WithListenAddr sets the address to listen on (default "127.0.0.1:0").
func WithListenAddr(addr string) Option { return func(o *options) { o.listen = addr } }

// WithAdvertiseAddr sets the host:port peers dial, when it differs from the
// listening address. Without it, a listener on a specific IP advertises
// that IP, and one on 0.0.0.0 or [::] advertises every interface that is up
// (see Interface).
func WithAdvertiseAddr(addr string) Option { return func(o *options) { o.advertise = addr } }

// WithSocketBuffers sets SO_SNDBUF and SO_RCVBUF (default 2 MiB).
func WithSocketBuffers(bytes int) Option { return func(o *options) { o.buffers = bytes } }

// WithKernelBuffers sets no buffer size and leaves the kernel to autotune.
// It suits one-way bulk traffic between hosts.
func WithKernelBuffers() Option { return func(o *options) { o.buffers = -1 } }

// WithPriority sets the priority used to pick a peer's primary transport
// (default 100, or 110 with WithTLS).
func WithPriority(p int) Option {
	return func(o *options) { o.cfg.Priority, o.prioritySet = p, true }
}

// New builds a TCP transport. It listens when the node starts it.
func New(opts ...Option) (*Transport, error) {
	o := options{listen: "127.0.0.1:0", buffers: DefaultSocketBuffer}
	o.cfg.Key = Key
	o.cfg.Priority = 100
	for _, opt := range opts {
		opt(&o)
	}
	if o.buffers == 0 || o.buffers < -1 {
		return nil, fmt.Errorf("tcp: socket buffer size must be positive, got %d", o.buffers)
	}
	n := &network{o: o}
	if err := n.setupTLS(); err != nil {
		return nil, err
	}
	s, err := streamsock.New(n, n.o.cfg)
	if err != nil {
		return nil, err
	}
	return &Transport{s: s}, nil
}

type network struct {
	o options
	// server and client are the TLS configs of the listener and the
	// dialer, nil without WithTLS (tls.go).
	server, client *tls.Config
}

func (n *network) control(_, _ string, c syscall.RawConn) error {
	if err := streamsock.SetUserTimeout(c, streamsock.UserTimeout); err != nil {
		return err
	}
	if n.o.buffers < 0 {
		return nil
	}
	return streamsock.SetBuffers(c, n.o.buffers)
}

func (n *network) Listen(ctx context.Context) (net.Listener, []byte, error) {
	lc := net.ListenConfig{Control: n.control}
	ln, err := lc.Listen(ctx, "tcp", n.o.listen)
	if err != nil {
		return nil, nil, err
	}
	ep, err := n.endpoint(ln.Addr())
	if err != nil {
		ln.Close()
		return nil, nil, err
	}
	if n.server != nil {
		// Accept hands over connections not yet handshaken: streamsock
		// runs each handshake on the connection's own goroutine.
		ln = tls.NewListener(ln, n.server)
	}
	return ln, ep, nil
}

// endpoint is the address entry for a listener: the reference's list of
// interfaces, or "host:port" text for an advertised host name (which the
// reference resolves when it registers the peer).
func (n *network) endpoint(bound net.Addr) ([]byte, error) {
	if n.o.advertise == "" {
		ap, err := netip.ParseAddrPort(bound.String())
		if err != nil {
			return nil, fmt.Errorf("tcp: listening address %s: %w", bound, err)
		}
		return EncodeEndpoint(advertise(ap)), nil
	}
	if ap, err := netip.ParseAddrPort(n.o.advertise); err == nil {
		return EncodeEndpoint(advertise(ap)), nil
	}
	if _, _, err := net.SplitHostPort(n.o.advertise); err != nil {
		return nil, fmt.Errorf("tcp: advertise address %q: %w", n.o.advertise, err)
	}
	return []byte(n.o.advertise), nil
}

// CheckEndpoint refuses, at registration, a peer entry this transport
// could never dial.
func (n *network) CheckEndpoint(ep []byte) error {
	_, err := ParseEndpoint(ep)
	return err
}

func (n *network) Dial(ctx context.Context, endpoint []byte) (net.Conn, error) {
	addr, err := DialAddr(endpoint)
	if err != nil {
		return nil, err
	}
	d := net.Dialer{Control: n.control}
	conn, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		return nil, err
	}
	// Go sets TCP_NODELAY by default; say it so a reader need not know.
	if tc, ok := conn.(*net.TCPConn); ok {
		tc.SetNoDelay(true)
	}
	if n.client != nil {
		return n.handshake(ctx, conn, addr)
	}
	return conn, nil
}
