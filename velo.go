// Package velo is the facade of the velo messaging library: build a Node
// with transports, register handlers, register peers and call them.
//
//	node, err := velo.New(ctx, velo.WithTransport(tr))
//	node.Register(velo.UnaryHandler("ping", func(c *velo.Context) ([]byte, error) { return []byte("pong"), nil }))
//	node.RegisterPeer(other.PeerInfo())
//	resp, err := node.Unary(ctx, other.InstanceID(), "ping", nil)
//
// A call's target is an instance id or a service name: with
// WithDiscovery and WithServiceDiscovery, workers call
// node.RegisterService(ctx, "llm-worker") and callers call
// node.Unary(ctx, velo.Service("llm-worker"), ...), which picks a live
// instance (see Service).
//
// A node may call itself (its own instance id, or a service it serves):
// the call runs its own handler as a peer's call would, without a
// transport (see docs/messaging.md, "Calls to this node itself").
//
// Every call that can wait takes a context; its deadline is the call's
// timeout (ErrRequestTimeout, which also matches context.DeadlineExceeded),
// and travels to the handler, whose Context.Context carries it and ends
// when the caller cancels or is lost.
//
// A handler's error can carry a Code that the caller reads (Errorf,
// NewError, ErrorCode), numbered as gRPC numbers its status codes; the
// library's sentinels keep their identity for errors.Is across the wire.
//
// A Node is a pointer: copies share one instance. Call Shutdown to drain
// and stop it.
package velo

import (
	"context"
	"crypto/tls"
	"log/slog"
	"sync"
	"time"

	"github.com/velo-go/velo/events"
	"github.com/velo-go/velo/ext"
	"github.com/velo-go/velo/internal/msgerr"
	"github.com/velo-go/velo/internal/msgrx"
	"github.com/velo-go/velo/internal/msgwire"
	"github.com/velo-go/velo/internal/rdma"
	"github.com/velo-go/velo/messenger"
	"github.com/velo-go/velo/metrics"
	"github.com/velo-go/velo/rendezvous"
	"github.com/velo-go/velo/streaming"
)

// Node is one velo instance: its messenger, which sends active messages
// and serves handlers, Events, its distributed event manager, and Streams,
// its stream anchors (same worker, and to and from other nodes: over the
// messenger mux by default, or one TCP connection per stream with a peer
// that has no mux).
type Node struct {
	m       *messenger.Messenger
	Events  *events.Manager
	Streams *streaming.Manager
	// Rendezvous stages large payloads by handle; the messenger uses it for
	// every request payload above its threshold (transparent staging).
	Rendezvous *rendezvous.Manager

	svc       *services // nil without WithServiceDiscovery
	publishes bool      // New published the PeerInfo (WithDiscovery)
	view      *nodeView // what Snapshot remembers between snapshots (a pointer: copies of a Node share it)

	rdmaReg  *rdma.Registry // nil without WithRDMA
	rdmaLog  *slog.Logger
	rdmaDown *sync.Once // the RDMA half of Shutdown runs once
}

// Option configures New. Only this package makes them.
type Option struct {
	apply  func(*messenger.Config)
	stream []streaming.ManagerOption
	rv     func(*rendezvous.Config)
	svc    func(*serviceConfig)
	rdma   *rdmaOption
}

// WithStagedFetchTimeout bounds how long this node fetches a staged request
// payload whose caller sent no deadline (fire-and-forget sends, calls
// without one). The caller then gets an error reply saying the fetch did
// not finish in time. 0 (the default) means no bound.
func WithStagedFetchTimeout(d time.Duration) Option {
	return Option{rv: func(c *rendezvous.Config) { c.FetchTimeout = d }}
}

// WithStagedPayloadMax is the largest payload this node takes from a peer by
// rendezvous. A larger stated size is refused before anything of that size
// is allocated: the handle is released and the caller gets an error naming
// both sizes. 0 (the default) means rendezvous.DefaultPayloadMax, 1 GiB; a
// negative n means no limit. Under the limit, the fetch buffer grows with
// the bytes that arrive, so an owner that states more than it sends costs
// only what it sent.
func WithStagedPayloadMax(n int64) Option {
	return Option{rv: func(c *rendezvous.Config) { c.PayloadMax = n }}
}

// WithStagingThreshold sets the request payload size above which the
// messenger stages (default rendezvous.DefaultThreshold, 256 KiB).
func WithStagingThreshold(n int) Option {
	return Option{rv: func(c *rendezvous.Config) { c.Threshold = n }}
}

// WithStreamListenAddr sets the address of the node's per-stream TCP
// listener (127.0.0.1:0 unless set), which takes the streams of peers
// that do not use the mux; see streaming.NewNodeManager.
func WithStreamListenAddr(addr string) Option {
	return Option{stream: []streaming.ManagerOption{streaming.WithStreamListenAddr(addr)}}
}

// WithMux sets the messenger mux of the node's streams (on by default;
// MuxConfig{Disabled: true} streams over one TCP connection per stream).
func WithMux(c streaming.MuxConfig) Option {
	return Option{stream: []streaming.ManagerOption{streaming.WithMux(c)}}
}

// WithTransport adds a transport (TCP, UDS, ...). At least one is needed.
func WithTransport(t ext.Transport) Option {
	return Option{apply: func(c *messenger.Config) { c.Transports = append(c.Transports, t) }}
}

// WithDiscovery finds peers that were not registered by hand. New also
// publishes the node's own PeerInfo there, and Shutdown withdraws it
// after the drain. A backend that reports vanished registrations
// (ext.PeerWatcher) makes calls in flight to such a peer fail with
// ErrPeerUnreachable.
func WithDiscovery(d ext.PeerDiscovery) Option {
	return Option{apply: func(c *messenger.Config) { c.Discovery = d }}
}

// WithMaxDiscoveredPeers bounds the peers the node keeps from discovery
// (default messenger.DefaultMaxDiscoveredPeers); past it the least recently
// used one is forgotten and found again on its next call.
func WithMaxDiscoveredPeers(n int) Option {
	return Option{apply: func(c *messenger.Config) { c.MaxDiscoveredPeers = n }}
}

// WithMetrics records into a VeloMetrics registered by the caller: the
// Transport families of the node's transports, the Messenger family, the
// Streaming and mux families of its streams (streaming.WithMetrics) and
// the Rendezvous family. A handler's series appear when it first runs;
// velo's own handlers count together under handler="_system" unless
// WithSystemHandlerMetrics. See docs/metrics.md.
func WithMetrics(m *metrics.VeloMetrics) Option {
	return Option{
		apply:  func(c *messenger.Config) { c.Metrics = m },
		stream: []streaming.ManagerOption{streaming.WithMetrics(m)},
	}
}

// WithUndeliveredHandler installs fn to hear of every message a transport
// admitted and then failed or discarded (see messenger.Config.OnUndelivered).
func WithUndeliveredHandler(fn func(peer ext.InstanceID, handler string, err error)) Option {
	return Option{apply: func(c *messenger.Config) { c.OnUndelivered = fn }}
}

// WithResponseSlots bounds the calls waiting for an answer at once (default
// and most 65536: a response id names its slot in 16 bits).
func WithResponseSlots(n int) Option {
	return Option{apply: func(c *messenger.Config) { c.ResponseSlots = n }}
}

// WithMaxRunningHandlers caps the handlers the node runs at once (default
// 10,000, messenger.DefaultMaxRunningHandlers). A request that arrives at
// the cap is answered at once with ErrOverloaded. Velo's own system
// handlers are not counted.
func WithMaxRunningHandlers(n int) Option {
	return Option{apply: func(c *messenger.Config) { c.MaxRunningHandlers = n }}
}

// WithSpawnQueue bounds the requests that wait in each spawn-mode
// handler's queue, in number and in bytes (defaults 1,024 and 4 MiB,
// messenger.DefaultSpawnQueueRequests and DefaultSpawnQueueBytes; 0 keeps
// a default, a negative bound is none). A connection that fills a queue
// past either bound is not read again until the handler's workers took it
// down to half, so a sender that outruns the handler is slowed by TCP
// rather than growing the receiver's heap; the frames the connection
// brought in the same read are delivered first. Under WithMaxConcurrent
// the queue is not bounded, and at WithMaxRunningHandlers the reader reads
// on and what comes is refused (see messenger.Config.SpawnQueueRequests).
// A send to the node itself waits for the queue as a reader does.
func WithSpawnQueue(requests, bytes int) Option {
	return Option{apply: func(c *messenger.Config) { c.SpawnQueueRequests, c.SpawnQueueBytes = requests, bytes }}
}

// WithLogger sends the node's warnings to l instead of slog.Default().
func WithLogger(l *slog.Logger) Option {
	return Option{apply: func(c *messenger.Config) { c.Logger = l }}
}

// New starts a node.
func New(ctx context.Context, opts ...Option) (*Node, error) {
	var cfg messenger.Config
	var sopts []streaming.ManagerOption
	var rvc rendezvous.Config
	var svcc serviceConfig
	var rdmaOpt *rdmaOption
	for _, o := range opts {
		if o.rdma != nil {
			if rdmaOpt != nil {
				return nil, errRDMATwice
			}
			rdmaOpt = o.rdma
		}
		if o.svc != nil {
			o.svc(&svcc)
		}
		if o.apply != nil {
			o.apply(&cfg)
		}
		if o.rv != nil {
			o.rv(&rvc)
		}
		sopts = append(sopts, o.stream...)
	}
	if cfg.Logger != nil {
		sopts = append(sopts, streaming.WithStreamLogger(cfg.Logger))
	}
	if rdmaOpt != nil {
		if err := applyRDMA(rdmaOpt, &cfg); err != nil {
			return nil, err
		}
	}
	if c := streamTLS(cfg.Transports); c != nil {
		sopts = append(sopts, streaming.WithStreamTLS(c))
	}
	m, err := messenger.New(ctx, cfg)
	if err != nil {
		return nil, err
	}
	var reg *rdma.Registry
	if rdmaOpt != nil {
		reg = newRegistry(rdmaOpt, cfg.Metrics, &rvc)
	}
	stopNow := func() {
		ctx, cancel := context.WithCancel(context.Background())
		cancel()
		if reg != nil {
			_ = reg.Shutdown(ctx) // nothing is registered yet: nothing to drain
		}
		m.Shutdown(ctx)
	}
	// Before PeerInfo is handed out: the stream listener is an entry of
	// this node's address.
	rvc.Metrics = cfg.Metrics
	rv, err := rendezvous.New(m, rvc)
	if err != nil {
		stopNow()
		return nil, err
	}
	msgrx.SetStager(m, rv)
	streams, err := streaming.NewNodeManager(m, sopts...)
	if err != nil {
		rv.Close()
		stopNow()
		return nil, err
	}
	ev, err := events.NewDistributed(m)
	if err != nil {
		rv.Close()
		streams.Close()
		stopNow()
		return nil, err
	}
	if cfg.Discovery != nil {
		if err := m.Publish(ctx); err != nil {
			rv.Close()
			ev.Close()
			streams.Close()
			stopNow()
			return nil, err
		}
	}
	n := &Node{m: m, Events: ev, Streams: streams, Rendezvous: rv, publishes: cfg.Discovery != nil, view: &nodeView{}, rdmaReg: reg, rdmaLog: cfg.Logger, rdmaDown: &sync.Once{}}
	if n.rdmaLog == nil {
		n.rdmaLog = slog.Default()
	}
	if svcc.disc != nil {
		n.svc = newServices(svcc, m)
	}
	return n, nil
}

// Shutdown drains and stops the node, as http.Server.Shutdown does: the
// node's service registrations (RegisterService) are withdrawn, new
// requests are refused at once (their callers get ErrShuttingDown), the
// requests already accepted run until none is left or ctx is done, then
// the transports stop, the remote event waits still pending fail, and the
// streams stop (streaming.Manager.Close). It
// returns ctx's error when ctx cut the drain short; an already done ctx
// stops without draining. With WithRDMA, the registered memory is let go
// before the transports stop, under the same ctx: pinned slots are copied
// to plain memory, so pulls already admitted finish, then the registry
// unmaps everything (see WithRDMA).
func (n *Node) Shutdown(ctx context.Context) error {
	werr := n.withdrawServices(ctx)
	if n.rdmaReg != nil {
		n.rdmaDown.Do(func() { n.shutdownRDMA(ctx) })
	}
	err := n.m.Shutdown(ctx)
	if n.rdmaReg != nil {
		// The transports are down: registrations the sweep could not end
		// are ended with them (see rdma.Registry.AfterBackendClose).
		n.rdmaReg.AfterBackendClose()
	}
	if n.svc != nil {
		n.svc.close()
	}
	n.Events.Close()
	n.Streams.Close()
	n.Rendezvous.Close()
	if err == nil {
		err = werr
	}
	return err
}

// BeginDrain refuses new requests (their callers fail fast with
// ErrShuttingDown) while accepted work, answers and drain-exempt handlers
// go on; rendezvous acquires are answered chunked (the RDMA path's reason
// draining). Call Shutdown to finish.
func (n *Node) BeginDrain() {
	n.m.BeginDrain()
	n.Rendezvous.BeginDrain()
}

// Done is closed once Shutdown has finished.
func (n *Node) Done() <-chan struct{} { return n.m.Done() }

// InstanceID of this node.
func (n *Node) InstanceID() ext.InstanceID { return n.m.InstanceID() }

// WorkerID of this node: the 64-bit routing name derived from its InstanceID.
func (n *Node) WorkerID() ext.WorkerID { return n.m.WorkerID() }

// PeerInfo is what another node needs to reach this one.
func (n *Node) PeerInfo() ext.PeerInfo { return n.m.PeerInfo() }

// Register adds a handler. Names starting with '_' are reserved.
func (n *Node) Register(h Handler) error { return n.m.Register(h) }

// Handlers lists the user handlers registered here.
func (n *Node) Handlers() []string { return n.m.Handlers() }

// RegisterPeer makes a peer reachable on every transport both sides have.
func (n *Node) RegisterPeer(info ext.PeerInfo) error { return n.m.RegisterPeer(info) }

// UnregisterPeer forgets a peer; a later send fails as to a peer never registered.
func (n *Node) UnregisterPeer(id ext.InstanceID) { n.m.UnregisterPeer(id) }

// DiscoverAndRegisterPeer looks a peer up through discovery and registers it.
func (n *Node) DiscoverAndRegisterPeer(ctx context.Context, id ext.InstanceID) error {
	return n.m.DiscoverAndRegisterPeer(ctx, id)
}

// Undelivered is how many messages to peer the transports took and then
// failed or discarded.
func (n *Node) Undelivered(peer ext.InstanceID) int64 { return n.m.Undelivered(peer) }

// Messenger is the node's messenger, for what the facade does not cover:
// system handlers, counters, subsystems built on it.
func (n *Node) Messenger() *messenger.Messenger { return n.m }

// Names from the messenger, so most programs import only velo.
type (
	Context       = messenger.Context
	Handler       = messenger.Handler
	HandlerOption = messenger.HandlerOption
	CallOption    = messenger.CallOption
	// RemoteError is the error a call returns when the remote handler (or
	// the remote messenger: unknown handler, panic, lane full) failed.
	// Handler and Op name what was called, Message is the remote's text,
	// Code and Reason its code and sentinel name. It unwraps to an *Error
	// with them, and errors.Is matches the sentinel the reason names.
	RemoteError    = msgerr.RemoteError
	OrderedConfig  = messenger.OrderedConfig
	OverflowPolicy = messenger.OverflowPolicy
)

var (
	ErrRequestTimeout    = messenger.ErrRequestTimeout
	ErrShuttingDown      = messenger.ErrShuttingDown
	ErrPeerNotRegistered = messenger.ErrPeerNotRegistered
	ErrReservedName      = messenger.ErrReservedName
	ErrDuplicateHandler  = messenger.ErrDuplicateHandler
	ErrLaneFull          = messenger.ErrLaneFull
	ErrNoResponseSlot    = messenger.ErrNoResponseSlot
	ErrUnknownHandler    = messenger.ErrUnknownHandler
	ErrOverloaded        = messenger.ErrOverloaded
	ErrPeerUnreachable   = messenger.ErrPeerUnreachable
	ErrPeerRestarted     = messenger.ErrPeerRestarted
	// ErrPeerUntrusted: a TLS handshake with the peer failed on trust
	// (tcp.WithTLS, tcp.WithPeerAuthorizer); it comes with
	// ErrPeerUnreachable.
	ErrPeerUntrusted = messenger.ErrPeerUntrusted
)

// Why a handler's context ended, as context.Cause reports it (see
// Context.Context). A deadline that passed is context.DeadlineExceeded;
// this node's shutdown past its drain budget is ErrShuttingDown.
var (
	ErrCallerCancelled = messenger.ErrCallerCancelled
	ErrCallerLost      = messenger.ErrCallerLost
)

// Header limits: a value of at most MaxHeaderValue bytes, all headers of a
// call at most MaxEncodedHeaders bytes encoded.
const (
	MaxHeaderValue    = msgwire.MaxHeaderValue
	MaxEncodedHeaders = msgwire.MaxEncodedHeaders
)

// Overflow policies for ordered lanes.
const (
	Warn   = messenger.Warn
	Reject = messenger.Reject
)

// UnaryHandler answers each request with bytes or an error.
func UnaryHandler(name string, fn func(*Context) ([]byte, error), opts ...HandlerOption) Handler {
	return messenger.UnaryHandler(name, fn, opts...)
}

// SyncHandler acknowledges each request once it has run, or returns its
// error to the caller.
func SyncHandler(name string, fn func(*Context) error, opts ...HandlerOption) Handler {
	return messenger.SyncHandler(name, fn, opts...)
}

// FireHandler runs for fire-and-forget messages; nothing goes back.
func FireHandler(name string, fn func(*Context), opts ...HandlerOption) Handler {
	return messenger.FireHandler(name, fn, opts...)
}

// TypedUnaryHandler decodes JSON requests into In and encodes Out as JSON.
func TypedUnaryHandler[In, Out any](name string, fn func(*Context, In) (Out, error), opts ...HandlerOption) Handler {
	return messenger.TypedUnaryHandler(name, fn, opts...)
}

// WithOrdered runs a handler's requests in arrival order per sending node.
func WithOrdered() HandlerOption { return messenger.WithOrdered() }

// WithOrderedGlobal runs a handler's requests in one total order.
func WithOrderedGlobal() HandlerOption { return messenger.WithOrderedGlobal() }

// WithOrderedConfig runs a handler's requests in order with explicit settings.
func WithOrderedConfig(c OrderedConfig) HandlerOption { return messenger.WithOrderedConfig(c) }

// WithMaxConcurrent bounds how many requests of a handler run at once.
func WithMaxConcurrent(n int) HandlerOption { return messenger.WithMaxConcurrent(n) }

// WithInline runs each request on the goroutine that read it off the
// connection; see messenger.WithInline for when that pays.
func WithInline() HandlerOption { return messenger.WithInline() }

// WithDrainExempt lets a handler's requests in during a drain: for handlers
// that serve work already accepted.
func WithDrainExempt() HandlerOption { return messenger.WithDrainExempt() }

// WithHeaders attaches headers to a call (values of at most 1 KiB, 16 KiB encoded).
func WithHeaders(h map[string]string) CallOption { return messenger.WithHeaders(h) }

// streamTLS is the TLS config of the node's TLS transport of highest
// priority (tcp.WithTLS, grpc.WithTLS: any with a TLSConfig method), for
// its per-stream listener: streams off the
// mux then run under the same TLS as its messages. nil when no transport
// speaks TLS.
func streamTLS(trs []ext.Transport) *tls.Config {
	var best *tls.Config
	prio := 0
	for _, t := range trs {
		tt, ok := t.(interface{ TLSConfig() *tls.Config })
		if !ok {
			continue
		}
		if c := tt.TLSConfig(); c != nil && (best == nil || t.Priority() > prio) {
			best, prio = c, t.Priority()
		}
	}
	return best
}
