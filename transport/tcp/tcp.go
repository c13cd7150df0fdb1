// Package tcp is the TCP messenger transport.
//
// Connections are one-directional and one per (peer, lane), dialed on the
// first send. Small frames are coalesced into one write; frames over 64 KiB
// are written in place. Socket buffers are sized on the listening socket
// before it listens and on a dialing socket before it connects, so the
// kernel never shrinks a window that is already open (see docs/transports.md).
package tcp

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"net/netip"
	"syscall"
	"time"

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
	listen    string
	advertise string
	buffers   int
	cfg       streamsock.Config
}

// WithListenAddr sets the address to listen on (default "127.0.0.1:0").
func WithListenAddr(addr string) Option { return func(o *options) { o.listen = addr } }

// WithAdvertiseAddr sets the host:port peers dial, when it differs from the
// listening address. Without it, a listener on a specific IP advertises
// that IP, and one on 0.0.0.0 or [::] advertises every interface that is up
// (see Interface).
func WithAdvertiseAddr(addr string) Option { return func(o *options) { o.advertise = addr } }

// WithLanes keeps up to n ordered connections to each peer (default 1).
func WithLanes(n int) Option { return func(o *options) { o.cfg.Lanes = n } }

// WithSocketBuffers sets SO_SNDBUF and SO_RCVBUF (default 2 MiB).
func WithSocketBuffers(bytes int) Option { return func(o *options) { o.buffers = bytes } }

// WithKernelBuffers sets no buffer size and leaves the kernel to autotune.
// It suits one-way bulk traffic between hosts.
func WithKernelBuffers() Option { return func(o *options) { o.buffers = -1 } }

// WithTeardownGrace sets how long queued frames are still written after
// Shutdown (default 1 s).
func WithTeardownGrace(d time.Duration) Option { return func(o *options) { o.cfg.TeardownGrace = d } }

// WithMaxFrameSize bounds header plus payload (default 16 MiB).
func WithMaxFrameSize(n int) Option { return func(o *options) { o.cfg.MaxFrameSize = n } }

// WithChannelBytes bounds the send channel of one (peer, lane) (default 4 MiB).
func WithChannelBytes(n int) Option { return func(o *options) { o.cfg.ChannelBytes = n } }

// WithPriority sets the priority used to pick a peer's primary transport (default 100).
func WithPriority(p int) Option { return func(o *options) { o.cfg.Priority = p } }

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
	s, err := streamsock.New(&network{o: o}, o.cfg)
	if err != nil {
		return nil, err
	}
	return &Transport{s: s}, nil
}

// Transport is the TCP messenger transport. It implements ext.Transport;
// the node calls its methods, and an application needs only New, the
// options, and Stats.
type Transport struct {
	s *streamsock.Transport
}

var _ ext.Transport = (*Transport)(nil)

// RetainsOwners says that the transport holds an outbound frame's Owner
// while it holds the frame's bytes (ext.OwnerRetainer).
func (t *Transport) RetainsOwners() bool { return true }

// Key is the address key, "tcp".
func (t *Transport) Key() ext.TransportKey { return t.s.Key() }

// Priority orders transports that reach the same peer; higher wins.
func (t *Transport) Priority() int { return t.s.Priority() }

// Start listens and returns the address entry peers dial.
func (t *Transport) Start(ctx context.Context, adapter *ext.TransportAdapter) ([]byte, error) {
	return t.s.Start(ctx, adapter)
}

// Register learns a peer's endpoint. Nothing is dialed until the first send.
func (t *Transport) Register(p ext.PeerInfo) error { return t.s.Register(p) }

// Unregister forgets a peer and closes its connections; frames still queued
// for it fail at once.
func (t *Transport) Unregister(id ext.InstanceID) { t.s.Unregister(id) }

// Send sends f on lane 0 without waiting for the wire.
func (t *Transport) Send(target ext.InstanceID, f ext.Frame) (ext.SendOutcome, error) {
	return t.s.SendOnLane(target, 0, f)
}

// SendOnLane sends f on one of the ordered lanes to target without waiting
// for the wire.
func (t *Transport) SendOnLane(target ext.InstanceID, lane int, f ext.Frame) (ext.SendOutcome, error) {
	return t.s.SendOnLane(target, lane, f)
}

// Lanes is the number of ordered connections kept to each peer.
func (t *Transport) Lanes(target ext.InstanceID) int { return t.s.Lanes(target) }

// MaxMessageSize is the largest header plus payload sent or accepted.
func (t *Transport) MaxMessageSize() int { return t.s.MaxMessageSize() }

// CheckHealth reports a peer healthy when one of its lanes is connected,
// and otherwise dials it once.
func (t *Transport) CheckHealth(ctx context.Context, target ext.InstanceID) error {
	return t.s.CheckHealth(ctx, target)
}

// SetObservability installs the metrics handle.
func (t *Transport) SetObservability(o ext.Observability) { t.s.SetObservability(o) }

// Shutdown writes what is queued until the teardown grace ends, fails the
// rest, says goodbye on each accepted connection and closes the listener.
func (t *Transport) Shutdown() { t.s.Shutdown() }

// Closed is closed once the writers are done (or the grace plus half a
// second passed) and the listener is closed.
func (t *Transport) Closed() <-chan struct{} { return t.s.Closed() }

// Stats are the counts of what the transport did to protect itself.
type Stats struct {
	// RefusedConnections: inbound connections closed as soon as they were
	// accepted, because WithMaxConnections were already open.
	RefusedConnections uint64
	// StalledConnections: inbound connections closed because a frame
	// stayed half-received past WithFrameTimeout.
	StalledConnections uint64
	// AcceptErrors: failed accepts (out of file descriptors, say), each
	// followed by a pause of 5 ms doubling up to 1 s.
	AcceptErrors uint64
}

// Stats reads the transport's counters.
func (t *Transport) Stats() Stats { return Stats(t.s.Stats()) }

// WithMaxConnections bounds the inbound connections open at once (default
// 4096). One more is closed as soon as it is accepted, and counted.
func WithMaxConnections(n int) Option { return func(o *options) { o.cfg.MaxConnections = n } }

// WithFrameTimeout bounds how long a frame may stay half-received before
// its connection is closed (default 30 s). The cut comes between one and
// one and a half timeouts after the frame started.
func WithFrameTimeout(d time.Duration) Option { return func(o *options) { o.cfg.FrameTimeout = d } }

// WithLogger sets where the transport logs (default slog.Default()).
func WithLogger(l *slog.Logger) Option { return func(o *options) { o.cfg.Logger = l } }

type network struct{ o options }

func (n *network) control(_, _ string, c syscall.RawConn) error {
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
	return conn, nil
}
