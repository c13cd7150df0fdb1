// Package grpc is the gRPC messenger transport: velo frames over grpc-go,
// in the Rust reference's format, so Go and Rust nodes mix. It also holds
// the gRPC frame transport for the per-stream path of streams
// (NewFrameTransport, key "grpc-stream"), a separate server on a listener
// of its own.
//
// A node serves one bidirectional method, /velo.streaming.v1.VeloStreaming/Stream,
// whose messages both ways are FramedData{preamble, header, payload}: one
// gRPC message per velo frame, the preamble the TCP frame's 11-byte
// prefix. A dialer opens one such stream per (peer, lane) — one per peer
// by default, as the reference does — over one HTTP/2 connection per peer.
// grpc-go redials a lost connection with its exponential backoff; a lost
// stream fails what was queued on it, reports the peer lost, and the next
// send opens a new stream.
//
// The listener writes back on a stream only ShuttingDown frames: the echo
// of a request it refused during a drain, and a goodbye (a ShuttingDown
// frame with an empty header) when it shuts down in order. A request that
// arrives on the dialer's read half has no return path: during a drain it
// is recorded as a rejection and dropped, as the reference does.
//
// The address entry has the TCP transport's shape (a MessagePack list of
// interfaces, see tcp.Interface) under the key "grpc"; plain "host:port",
// with or without "grpc://" or "tcp://", is read too.
//
// WithTLS runs both ends over TLS (mutual TLS as an option).
//
// Limits: the transport does not stamp inbound frames with their
// connection (ext.Frame.Conn is 0), so the node's identity proofs do not
// bind gRPC streams, and a handler cannot read the caller's certificate.
package grpc

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/netip"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	ggrpc "google.golang.org/grpc"
	"google.golang.org/grpc/keepalive"

	"github.com/velo-go/velo/ext"
	"github.com/velo-go/velo/internal/frame"
	"github.com/velo-go/velo/transport/tcp"
)

// errNotStarted refuses a send before Start: there is no adapter to
// report its fate to.
var errNotStarted = errors.New("grpc: transport not started")

// Key is the address key of the gRPC transport, as in the reference.
const Key ext.TransportKey = "grpc"

const (
	defaultPriority     = 90
	defaultGrace        = time.Second
	defaultChannelBytes = 4 << 20
	defaultConnTimeout  = 5 * time.Second
	// msgOverhead is what a FramedData message adds to a frame's bytes:
	// three tags and length varints and the preamble, with room to spare.
	msgOverhead = 64

	// Keep-alive: a client pings after keepaliveTime without traffic and
	// drops the connection when no answer comes within keepaliveTimeout;
	// the server lets clients ping as often as every keepaliveMinTime.
	keepaliveTime    = 30 * time.Second
	keepaliveTimeout = 10 * time.Second
	keepaliveMinTime = 10 * time.Second
)

// Option configures the transport.
type Option func(*options)

type options struct {
	listen       string
	advertise    string
	priority     int
	lanes        int
	maxFrame     int
	grace        time.Duration
	channelBytes int
	connTimeout  time.Duration
	logger       *slog.Logger
	tls          *tls.Config // WithTLS, as given
}

// WithListenAddr sets the address the gRPC server listens on (default
// "127.0.0.1:0").
func WithListenAddr(addr string) Option { return func(o *options) { o.listen = addr } }

// WithAdvertiseAddr sets the host:port peers dial, when it differs from the
// listening address.
func WithAdvertiseAddr(addr string) Option { return func(o *options) { o.advertise = addr } }

// WithPriority sets the priority used to pick a peer's primary transport
// (default 90, below TCP's 100).
func WithPriority(p int) Option { return func(o *options) { o.priority = p } }

// WithLanes keeps n ordered streams to each peer (default 1, as the
// reference), all on the peer's one HTTP/2 connection.
func WithLanes(n int) Option { return func(o *options) { o.lanes = n } }

// WithMaxFrameSize bounds header plus payload (default 16 MiB). It also
// sets grpc-go's message size limits, on both ends of this transport.
func WithMaxFrameSize(n int) Option { return func(o *options) { o.maxFrame = n } }

// WithTeardownGrace sets how long queued frames are still written after
// Shutdown (default 1 s).
func WithTeardownGrace(d time.Duration) Option { return func(o *options) { o.grace = d } }

// WithChannelBytes bounds the send channel of one (peer, lane); sends
// beyond it wait in the admission gate (default 4 MiB).
func WithChannelBytes(n int) Option { return func(o *options) { o.channelBytes = n } }

// WithConnectTimeout bounds how long opening a stream waits for the
// peer's connection (default 5 s, as the reference).
func WithConnectTimeout(d time.Duration) Option { return func(o *options) { o.connTimeout = d } }

// WithLogger sets where the transport logs (default slog.Default()).
func WithLogger(l *slog.Logger) Option { return func(o *options) { o.logger = l } }

// Transport is the gRPC messenger transport. Build it with New and give it
// to a node (velo.WithTransport).
type Transport struct {
	o   options
	log *slog.Logger
	tls *tls.Config // WithTLS, checked and cloned; nil in the clear

	adapter *ext.TransportAdapter
	srv     *ggrpc.Server
	ln      net.Listener
	obsv    atomic.Pointer[obsBox]

	peersMu sync.Mutex
	peers   map[ext.InstanceID]*peer
	conns   map[*ggrpc.ClientConn]struct{} // open client connections, under peersMu

	started  atomic.Bool // Start returned: adapter and server are set
	closing  atomic.Bool
	shutOnce sync.Once
	bye      chan struct{} // closed when the server streams say goodbye
	closedCh chan struct{}
	lanes    sync.WaitGroup // lane writers
	wg       sync.WaitGroup // lane readers and server stream readers
	serveErr chan error
	// readersMu orders a stream handler's wg.Add before finishShutdown's
	// wait for the readers: grpc-go's Stop does not wait for handlers, so
	// a handler may reach its Add after the server stopped and the count
	// fell to zero. noReaders: the server stopped, handlers add none.
	readersMu sync.Mutex
	noReaders bool
}

type obsBox struct{ ext.Observability }

// peer is one registered instance: its endpoint, its HTTP/2 connection
// (made on the first send) and its lanes.
type peer struct {
	id   ext.InstanceID
	ep   []byte
	addr string

	mu    sync.Mutex
	cc    *ggrpc.ClientConn
	creds *clientCreds // cc's
	lanes []*lane
	stats []laneCounters // one per lane slot, kept across its streams (lanestats.go)
	gone  bool
}

// New builds a gRPC transport. It listens when the node starts it.
func New(opts ...Option) (*Transport, error) {
	o := options{
		listen: "127.0.0.1:0", priority: defaultPriority, lanes: 1,
		maxFrame: frame.DefaultMaxFrame, grace: defaultGrace,
		channelBytes: defaultChannelBytes, connTimeout: defaultConnTimeout,
	}
	for _, opt := range opts {
		opt(&o)
	}
	switch {
	case o.lanes < 1 || o.lanes > 64:
		return nil, fmt.Errorf("grpc: lanes must be 1..64, got %d", o.lanes)
	case o.maxFrame < 1 || o.maxFrame > 1<<30:
		return nil, fmt.Errorf("grpc: max frame size %d out of range", o.maxFrame)
	case o.grace < 0 || o.channelBytes < 1 || o.connTimeout <= 0:
		return nil, errors.New("grpc: grace, channel size and connect timeout must be positive")
	}
	if o.logger == nil {
		o.logger = slog.Default()
	}
	tlsCfg, err := checkTLS(o.tls)
	if err != nil {
		return nil, err
	}
	t := &Transport{
		o: o, log: o.logger.With("transport", string(Key)), tls: tlsCfg,
		peers: map[ext.InstanceID]*peer{}, conns: map[*ggrpc.ClientConn]struct{}{},
		bye: make(chan struct{}), closedCh: make(chan struct{}), serveErr: make(chan error, 1),
	}
	t.obsv.Store(&obsBox{ext.NopObservability{}})
	return t, nil
}

func (t *Transport) obs() ext.Observability { return t.obsv.Load().Observability }

// Key names the transport in addresses ("grpc").
func (t *Transport) Key() ext.TransportKey { return Key }

// Priority orders the transport against others that reach a peer.
func (t *Transport) Priority() int { return t.o.priority }

// MaxMessageSize is the largest header plus payload the transport sends.
func (t *Transport) MaxMessageSize() int { return t.o.maxFrame }

// Lanes is the number of ordered streams kept to each peer.
func (t *Transport) Lanes(ext.InstanceID) int { return t.o.lanes }

// RetainsOwners says that the transport holds an outbound frame's Owner
// until the frame is encoded, so senders need not copy pooled buffers.
func (t *Transport) RetainsOwners() bool { return true }

// SetObservability gives the transport the handle to record into.
func (t *Transport) SetObservability(o ext.Observability) {
	if o == nil {
		o = ext.NopObservability{}
	}
	t.obsv.Store(&obsBox{o})
}

// Start listens, serves the VeloStreaming service and returns the address
// entry.
func (t *Transport) Start(ctx context.Context, adapter *ext.TransportAdapter) ([]byte, error) {
	if t.adapter != nil {
		return nil, errors.New("grpc: transport already started")
	}
	var lc net.ListenConfig
	ln, err := lc.Listen(ctx, "tcp", t.o.listen)
	if err != nil {
		return nil, fmt.Errorf("grpc: listen: %w", err)
	}
	ep, err := t.endpoint(ln.Addr())
	if err != nil {
		ln.Close()
		return nil, err
	}
	t.adapter, t.ln = adapter, ln
	t.srv = ggrpc.NewServer(
		ggrpc.Creds(serverCreds(t.tls)),
		ggrpc.ForceServerCodecV2(codec{}),
		ggrpc.KeepaliveEnforcementPolicy(keepalive.EnforcementPolicy{MinTime: keepaliveMinTime, PermitWithoutStream: true}),
		ggrpc.MaxRecvMsgSize(t.o.maxFrame+msgOverhead),
		ggrpc.MaxSendMsgSize(t.o.maxFrame+msgOverhead),
	)
	t.srv.RegisterService(&serviceDesc, t)
	go func() { t.serveErr <- t.srv.Serve(ln) }()
	t.started.Store(true)
	return ep, nil
}

// endpoint is the address entry for the listener: the TCP transport's list
// of interfaces, or "host:port" text for an advertised host name.
func (t *Transport) endpoint(bound net.Addr) ([]byte, error) {
	addr := t.o.advertise
	if addr == "" {
		addr = bound.String()
	}
	if ap, err := netip.ParseAddrPort(addr); err == nil {
		return tcp.EncodeEndpoint(tcp.Advertise(ap)), nil
	}
	if _, _, err := net.SplitHostPort(addr); err != nil {
		return nil, fmt.Errorf("grpc: advertise address %q: %w", addr, err)
	}
	return []byte(addr), nil
}

// dialAddr picks the host:port to dial from a peer's entry.
func dialAddr(ep []byte) (string, error) {
	if s, ok := strings.CutPrefix(string(ep), "grpc://"); ok {
		ep = []byte(s)
	}
	return tcp.DialAddr(ep)
}

// Register learns a peer's endpoint. Registering again with another
// endpoint replaces the old connection.
func (t *Transport) Register(p ext.PeerInfo) error {
	ep, err := p.Address.Lookup(Key)
	if err != nil {
		return err
	}
	addr, err := dialAddr(ep)
	if err != nil {
		return fmt.Errorf("grpc: peer %s: %w", p.InstanceID, err)
	}
	t.peersMu.Lock()
	cur, ok := t.peers[p.InstanceID]
	if ok && string(cur.ep) == string(ep) {
		t.peersMu.Unlock()
		return nil
	}
	t.peers[p.InstanceID] = &peer{id: p.InstanceID, ep: append([]byte(nil), ep...), addr: addr, lanes: make([]*lane, t.o.lanes), stats: make([]laneCounters, t.o.lanes)}
	t.peersMu.Unlock()
	if ok {
		t.closePeer(cur)
	} else {
		t.obs().RegisteredPeers(1)
	}
	return nil
}

// Unregister forgets a peer and closes its streams and connection; frames
// still queued for it fail at once. It is cheap and idempotent.
func (t *Transport) Unregister(id ext.InstanceID) {
	t.peersMu.Lock()
	p, ok := t.peers[id]
	delete(t.peers, id)
	t.peersMu.Unlock()
	if ok {
		t.obs().RegisteredPeers(-1)
		t.closePeer(p)
	}
}

// closePeer aborts the lanes of a peer that is gone and closes its
// connection once their writers are done with it.
func (t *Transport) closePeer(p *peer) {
	p.mu.Lock()
	p.gone = true
	lanes := append([]*lane(nil), p.lanes...)
	cc := p.cc
	p.mu.Unlock()
	for _, l := range lanes {
		if l != nil {
			l.abort()
		}
	}
	if cc == nil {
		return
	}
	go func() {
		for _, l := range lanes {
			if l != nil {
				<-l.done
			}
		}
		t.closeConn(cc)
	}()
}

// Send sends f on lane 0.
func (t *Transport) Send(target ext.InstanceID, f ext.Frame) (ext.SendOutcome, error) {
	return t.SendOnLane(target, 0, f)
}

// SendOnLane puts f on the send channel of (target, lane). It never waits
// for the wire; a full channel gives a Pending outcome.
func (t *Transport) SendOnLane(target ext.InstanceID, lane int, f ext.Frame) (ext.SendOutcome, error) {
	if t.closing.Load() {
		return ext.SendOutcome{}, ext.ErrTransportClosed
	}
	if !t.started.Load() {
		return ext.SendOutcome{}, errNotStarted
	}
	obs := t.obs()
	if err := frame.CheckSize(f, t.o.maxFrame); err != nil {
		obs.Rejection(ext.RejectTooLarge)
		return ext.SendOutcome{}, err
	}
	if lane < 0 || lane >= t.o.lanes {
		return ext.SendOutcome{}, fmt.Errorf("%w: %d of %d", ext.ErrLaneOutOfRange, lane, t.o.lanes)
	}
	if f.Owner != nil {
		f.Owner.Retain() // released once the frame is encoded or failed
	}
	// A lane that died between the lookup and the send refuses it with
	// ErrConnectionClosed; the second try starts a fresh one.
	for try := 0; ; try++ {
		l, err := t.laneFor(target, lane)
		if err != nil {
			f.Release()
			if errors.Is(err, ext.ErrPeerNotRegistered) {
				obs.Rejection(ext.RejectUnknownPeer)
			}
			return ext.SendOutcome{}, err
		}
		units := frame.PreambleLen + f.Len()
		var out ext.SendOutcome
		if f.Urgent {
			err = l.gate.SendFirst(f, units)
		} else {
			out, err = l.gate.Send(f, units)
		}
		if err == nil {
			obs.Frames(ext.Outbound, f.Type, ext.Accepted, 1, f.Len())
			return out, nil
		}
		if try == 1 || !errors.Is(err, ext.ErrConnectionClosed) {
			obs.Frames(ext.Outbound, f.Type, ext.Rejected, 1, f.Len())
			f.Release()
			return ext.SendOutcome{}, err
		}
	}
}

// laneFor returns the live lane idx to target, starting one (and the
// peer's connection) when there is none.
func (t *Transport) laneFor(target ext.InstanceID, idx int) (*lane, error) {
	t.peersMu.Lock()
	p, ok := t.peers[target]
	t.peersMu.Unlock()
	if !ok {
		return nil, fmt.Errorf("%w: %s", ext.ErrPeerNotRegistered, target)
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if l := p.lanes[idx]; l != nil {
		return l, nil
	}
	if p.gone {
		return nil, fmt.Errorf("%w: %s", ext.ErrPeerNotRegistered, target)
	}
	if t.closing.Load() {
		return nil, ext.ErrTransportClosed
	}
	if p.cc == nil {
		cc, creds, err := t.dial(p.addr)
		if err != nil {
			return nil, fmt.Errorf("grpc: peer %s at %s: %w: %w", target, p.addr, ext.ErrPeerUnreachable, err)
		}
		p.cc, p.creds = cc, creds
		t.peersMu.Lock()
		t.conns[cc] = struct{}{}
		t.peersMu.Unlock()
		t.obs().ActiveConnections(1)
	}
	l := newLane(t, p, idx)
	p.lanes[idx] = l
	t.lanes.Add(1)
	go l.run()
	return l, nil
}

// dial makes the peer's client connection. It does not connect yet: the
// first stream does, and grpc-go redials a lost connection with its
// exponential backoff (1 s base, 1.6 factor, 120 s cap, jittered).
func (t *Transport) dial(addr string) (*ggrpc.ClientConn, *clientCreds, error) {
	creds := newClientCreds(t.tls)
	cc, err := ggrpc.NewClient("passthrough:///"+addr,
		ggrpc.WithTransportCredentials(creds),
		ggrpc.WithDefaultCallOptions(
			ggrpc.ForceCodecV2(codec{}),
			ggrpc.MaxCallRecvMsgSize(t.o.maxFrame+msgOverhead),
			ggrpc.MaxCallSendMsgSize(t.o.maxFrame+msgOverhead),
		),
		ggrpc.WithConnectParams(connectParams(t.o.connTimeout)),
		// Pings find a peer that vanished without a reset (a host gone
		// from the network) while streams are open.
		ggrpc.WithKeepaliveParams(keepalive.ClientParameters{Time: keepaliveTime, Timeout: keepaliveTimeout}),
	)
	return cc, creds, err
}

// TLSConfig is a copy of the config the transport serves and dials with
// (WithTLS, with the version floor it added), or nil in the clear. A node
// gives it to its per-stream TCP listener, so that streams off the mux
// run under the same TLS as its messages.
func (t *Transport) TLSConfig() *tls.Config {
	if t.tls == nil {
		return nil
	}
	return t.tls.Clone()
}

// CheckHealth reports a peer healthy when one of its lanes has an open
// stream; otherwise it connects the peer's client connection and waits,
// within ctx, for it to be ready.
func (t *Transport) CheckHealth(ctx context.Context, target ext.InstanceID) error {
	t.peersMu.Lock()
	p, ok := t.peers[target]
	t.peersMu.Unlock()
	if !ok {
		return fmt.Errorf("%w: %s", ext.ErrPeerNotRegistered, target)
	}
	p.mu.Lock()
	cc, creds := p.cc, p.creds
	live := false
	for _, l := range p.lanes {
		live = live || (l != nil && l.open.Load())
	}
	p.mu.Unlock()
	if live {
		return nil
	}
	if cc == nil {
		// A probe of its own, closed after: the peer's connection is made
		// by the first send, which may come from another goroutine.
		var err error
		if cc, creds, err = t.dial(p.addr); err != nil {
			return fmt.Errorf("grpc: peer %s: %w: %w", target, ext.ErrPeerUnreachable, err)
		}
		defer cc.Close()
	}
	if err := waitReady(ctx, cc); err != nil {
		return fmt.Errorf("grpc: peer %s at %s: %w: %w", target, p.addr, ext.ErrPeerUnreachable, creds.explain(err))
	}
	return nil
}

// Shutdown tears the transport down. Lane writers keep writing what is
// queued until the grace ends and fail the rest, then half-close their
// streams and wait (within the grace) for the listener to end them, so
// nothing grpc-go still buffers is cut off. The server says goodbye on
// every inbound stream once the writers are done and stops; Closed reports
// when all of it is over.
func (t *Transport) Shutdown() { t.shutdown(false) }

// kill stops the transport as a crash would: streams, connections and the
// listener close at once, with no goodbye, and queued frames fail.
func (t *Transport) kill() { t.shutdown(true) }

func (t *Transport) shutdown(abrupt bool) {
	t.shutOnce.Do(func() {
		t.closing.Store(true)
		deadline := time.Now().Add(t.o.grace)
		t.peersMu.Lock()
		peers := make([]*peer, 0, len(t.peers))
		for _, p := range t.peers {
			peers = append(peers, p)
		}
		t.peersMu.Unlock()
		for _, p := range peers {
			p.mu.Lock()
			for _, l := range p.lanes {
				switch {
				case l == nil:
				case abrupt:
					l.abort()
				default:
					l.teardown(deadline)
				}
			}
			p.mu.Unlock()
		}
		go t.finishShutdown(deadline, abrupt)
	})
}

// finishShutdown waits for the writers (up to the deadline), stops the
// server, closes the peers' connections and then Closed.
func (t *Transport) finishShutdown(deadline time.Time, abrupt bool) {
	if !abrupt {
		waitUntil(&t.lanes, deadline)
	}
	close(t.bye)
	if t.srv != nil {
		if abrupt {
			t.srv.Stop()
		} else {
			stopped := make(chan struct{})
			go func() { t.srv.GracefulStop(); close(stopped) }()
			timer := time.NewTimer(max(time.Until(deadline), 0) + goodbyeWait)
			select {
			case <-stopped:
			case <-timer.C:
				t.srv.Stop()
				<-stopped
			}
			timer.Stop()
		}
		<-t.serveErr
	}
	t.readersMu.Lock()
	t.noReaders = true // before the wait for them below
	t.readersMu.Unlock()
	t.lanes.Wait() // each ends by its deadline, or at once when aborted
	t.peersMu.Lock()
	conns := make([]*ggrpc.ClientConn, 0, len(t.conns))
	for cc := range t.conns {
		conns = append(conns, cc)
	}
	t.peersMu.Unlock()
	for _, cc := range conns {
		t.closeConn(cc)
	}
	// A reader blocked on a full inbound queue ends when the node closes
	// its adapter, which it may do only after Closed: bound the wait.
	waitUntil(&t.wg, time.Now().Add(readerWait))
	close(t.closedCh)
}

// closeConn closes a peer's client connection, once: an unregistered
// peer's as its lanes end, the rest at shutdown.
func (t *Transport) closeConn(cc *ggrpc.ClientConn) {
	t.peersMu.Lock()
	_, open := t.conns[cc]
	delete(t.conns, cc)
	t.peersMu.Unlock()
	if open {
		cc.Close()
		t.obs().ActiveConnections(-1)
	}
}

// goodbyeWait bounds how long the server waits, past the grace, for its
// streams' dialers to close them after the goodbye.
const goodbyeWait = 100 * time.Millisecond

// readerWait bounds the wait for stream readers at the end of a shutdown.
const readerWait = 500 * time.Millisecond

// waitUntil waits for wg, or until deadline.
func waitUntil(wg *sync.WaitGroup, deadline time.Time) {
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	timer := time.NewTimer(time.Until(deadline))
	defer timer.Stop()
	select {
	case <-done:
	case <-timer.C:
	}
}

// Closed is closed once the writers finished (or failed what they could
// not write by the grace), the server stopped and every connection closed.
func (t *Transport) Closed() <-chan struct{} { return t.closedCh }
