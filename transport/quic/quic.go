// Package quic is the QUIC messenger transport, over quic-go.
//
// It has the TCP transport's shape and shares its code (peers, lanes, the
// admission gate, the coalescing writer, the frame reader, the drain echo,
// the goodbye and teardown): one connection per (peer, lane, direction),
// dialed on the first send on that lane, each carrying one bidirectional
// stream of velo frames in the TCP frame codec. The dialer writes requests
// and replies on it; the listener writes back only drain echoes and its
// goodbye.
//
// Each transport makes a self-signed certificate and puts its SHA-256
// fingerprint in its address entry (EndpointInfo); a dialer accepts only
// that certificate, so a different listener on a reused port fails the
// handshake with an error matching ext.ErrPeerUntrusted. The entry and the
// TLS settings (ALPN "velo-quic/1", server name "velo") are the Rust
// reference's, so Go and Rust nodes can dial each other.
//
// A connection's end is seen at once when the peer closes it or resets
// its stream. A peer that dies without a word (a crash, a lost host: UDP
// has no FIN, and quic-go ignores ICMP) is found only by the idle timeout,
// 15 s by default; see docs/transports.md.
package quic

// The forwarding methods to internal/streamsock are generated from the
// template the TCP and Unix socket transports use.
//go:generate go run ../../internal/streamsock/genfront quic

import (
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/velo-go/velo/ext"
	"github.com/velo-go/velo/internal/streamsock"
)

// Key is the address key of the QUIC transport.
const Key ext.TransportKey = "quic"

// Defaults of the options below.
const (
	// DefaultKeepAlive is the QUIC keep-alive interval (WithKeepAlive).
	DefaultKeepAlive = 5 * time.Second
	// DefaultIdleTimeout is three keep-alives (WithIdleTimeout): the bound
	// on finding a peer that died without closing.
	DefaultIdleTimeout = 15 * time.Second
	// DefaultConnectTimeout bounds a dial's handshake (WithConnectTimeout).
	DefaultConnectTimeout = 5 * time.Second
	// DefaultServerEndpoints is the number of server sockets
	// (WithServerEndpoints).
	DefaultServerEndpoints = 4
	// DefaultRecvBuffer is the SO_RCVBUF requested on every UDP socket.
	DefaultRecvBuffer = 8 << 20
	// DefaultSendBuffer is the SO_SNDBUF requested on every UDP socket.
	DefaultSendBuffer = 4 << 20
	// DefaultPriority is below TCP's 100: on one network TCP is the
	// cheaper of the two, so a peer reachable by both is sent TCP.
	DefaultPriority = 90
)

// Option configures the transport.
type Option func(*options)

type options struct {
	listen          string
	advertise       string
	cfg             streamsock.Config
	keepAlive       time.Duration
	idleTimeout     time.Duration
	connectTimeout  time.Duration
	serverEndpoints int
	recvBuf         int
	sendBuf         int
	streamWindow    int
	maxMTU          int // WithMaxMTU; 0: quic-go's discovery
}

// WithListenAddr sets the UDP address to bind (default "127.0.0.1:0").
// With a fixed port P the server sockets take ports P to P+n-1, n being
// WithServerEndpoints; open all of them in a firewall.
func WithListenAddr(addr string) Option { return func(o *options) { o.listen = addr } }

// WithAdvertiseAddr sets the ip:port peers dial when it differs from the
// bound address (behind NAT, say).
func WithAdvertiseAddr(addr string) Option { return func(o *options) { o.advertise = addr } }

// WithPriority sets the priority used to pick a peer's primary transport
// (default DefaultPriority).
func WithPriority(p int) Option { return func(o *options) { o.cfg.Priority = p } }

// WithLanes keeps up to n connections to each peer, one for each lane used,
// each dialed from its own UDP socket (default 1). One QUIC connection does
// its packet and crypto work on about one core; lanes spread it.
func WithLanes(n int) Option { return func(o *options) { o.cfg.Lanes = n } }

// WithServerEndpoints binds n server sockets, each on its own port
// (default 4). A dialer sends lane k to socket (offset + k) % n, offset
// taken from its own certificate, so one dialer's lanes land on different
// sockets and dialers spread over them.
func WithServerEndpoints(n int) Option { return func(o *options) { o.serverEndpoints = n } }

// WithUDPBuffers requests SO_RCVBUF and SO_SNDBUF for every UDP socket
// (default 8 MiB and 4 MiB). The kernel clamps them to net.core.rmem_max
// and net.core.wmem_max; a clamp is logged as a warning. Zero or less
// leaves a size to quic-go and the kernel.
func WithUDPBuffers(recv, send int) Option {
	return func(o *options) { o.recvBuf, o.sendBuf = recv, send }
}

// WithKeepAlive sets the QUIC keep-alive interval (default 5 s).
func WithKeepAlive(d time.Duration) Option { return func(o *options) { o.keepAlive = d } }

// WithIdleTimeout sets how long a connection may receive nothing before it
// is closed (default 15 s, three keep-alives). It is how a peer that died
// without closing is found: its connection ends then, its queued frames
// fail and it is reported lost.
func WithIdleTimeout(d time.Duration) Option { return func(o *options) { o.idleTimeout = d } }

// WithConnectTimeout bounds a dial's handshake (default 5 s).
func WithConnectTimeout(d time.Duration) Option { return func(o *options) { o.connectTimeout = d } }

// WithStreamReceiveWindow sets the largest flow-control window of the
// stream (default quic-go's 6 MiB).
func WithStreamReceiveWindow(bytes int) Option { return func(o *options) { o.streamWindow = bytes } }

// WithMaxConnections bounds the inbound connections open at once (default
// 4096). One more is closed as soon as its stream opens, and counted.
func WithMaxConnections(n int) Option { return func(o *options) { o.cfg.MaxConnections = n } }

// WithFrameTimeout bounds how long a frame may stay half-received before
// its connection is closed (default 30 s); it also bounds how long an
// accepted connection may wait before opening its stream.
func WithFrameTimeout(d time.Duration) Option { return func(o *options) { o.cfg.FrameTimeout = d } }

// Transport is the QUIC messenger transport. It implements ext.Transport;
// the node calls its methods, and an application needs only New, the
// options, Fingerprint and Stats.
type Transport struct {
	s *streamsock.Transport
	n *network

	shutOnce sync.Once
	closed   chan struct{}
}

// New builds a QUIC transport and its certificate. It binds its sockets
// when the node starts it.
func New(opts ...Option) (*Transport, error) {
	o := &options{
		listen:          "127.0.0.1:0",
		keepAlive:       DefaultKeepAlive,
		idleTimeout:     DefaultIdleTimeout,
		connectTimeout:  DefaultConnectTimeout,
		serverEndpoints: DefaultServerEndpoints,
		recvBuf:         DefaultRecvBuffer,
		sendBuf:         DefaultSendBuffer,
	}
	o.cfg.Key = Key
	o.cfg.Priority = DefaultPriority
	for _, opt := range opts {
		opt(o)
	}
	switch {
	case o.serverEndpoints < 1 || o.serverEndpoints > 256:
		return nil, fmt.Errorf("quic: server endpoints must be 1..256, got %d", o.serverEndpoints)
	case o.keepAlive < 0 || o.idleTimeout <= 0 || o.connectTimeout <= 0:
		return nil, fmt.Errorf("quic: keep-alive, idle and connect timeouts must be positive")
	}
	if o.cfg.FrameTimeout == 0 {
		o.cfg.FrameTimeout = streamsock.DefaultFrameTimeout
	}
	if o.cfg.Logger == nil {
		o.cfg.Logger = slog.Default()
	}
	id, err := newIdentity()
	if err != nil {
		return nil, err
	}
	n := newNetwork(o, id)
	s, err := streamsock.New(n, o.cfg)
	if err != nil {
		return nil, err
	}
	return &Transport{s: s, n: n, closed: make(chan struct{})}, nil
}

// Fingerprint is the SHA-256 digest of this transport's certificate, as
// its address entry gives it to peers.
func (t *Transport) Fingerprint() Fingerprint { return t.n.id.fingerprint }

// closeLimit bounds the wait, after the shared transport closed, for
// connections still waiting for their peer to take what they wrote.
const closeLimit = 2 * finishGrace

// Shutdown writes what is queued until the teardown grace ends and fails
// the rest, says goodbye on each accepted connection, and closes the
// listener. Each connection then finishes its stream and waits up to 1 s
// for the peer to have read it before it closes, since a QUIC close
// discards what the peer has not acknowledged.
func (t *Transport) Shutdown() { t.stop(false) }

func (t *Transport) stop(abrupt bool) {
	t.shutOnce.Do(func() {
		if abrupt {
			t.n.abrupt.Store(true)
			t.s.Kill()
		} else {
			t.s.Shutdown()
		}
		go func() {
			<-t.s.Closed()
			limit := closeLimit
			if abrupt {
				limit = 0
			}
			t.n.closeAll(limit)
			close(t.closed)
		}()
	})
}

// Closed is closed once the writers are done, each connection has
// finished (or waited its limit), and the sockets are closed.
func (t *Transport) Closed() <-chan struct{} { return t.closed }

// Stats are the counts of what the transport did to protect itself.
type Stats struct {
	// RefusedConnections: inbound connections closed as soon as their
	// stream opened, because WithMaxConnections were already open.
	RefusedConnections uint64
	// StalledConnections: inbound connections closed because a frame
	// stayed half-received past WithFrameTimeout.
	StalledConnections uint64
	// FenceWaits: sends that waited because they came past the first
	// 256 KiB on a new connection to a Go node, until the node confirmed
	// the connection.
	FenceWaits uint64
	// FenceTimeouts: new connections whose node did not confirm them
	// within 5 s while sends waited; the sends then went out anyway.
	FenceTimeouts uint64
}

// Stats reads the transport's counters.
func (t *Transport) Stats() Stats {
	s := t.s.Stats()
	return Stats{
		RefusedConnections: s.RefusedConnections,
		StalledConnections: s.StalledConnections,
		FenceWaits:         s.FenceWaits,
		FenceTimeouts:      s.FenceTimeouts,
	}
}
