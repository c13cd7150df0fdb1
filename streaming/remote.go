package streaming

import (
	"crypto/tls"
	"log/slog"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"github.com/velo-go/velo/ext"
	"github.com/velo-go/velo/internal/msgrx"
	"github.com/velo-go/velo/internal/msgwire"
	wire "github.com/velo-go/velo/internal/streamwire"
	"github.com/velo-go/velo/messenger"
	"github.com/velo-go/velo/metrics"
	"github.com/velo-go/velo/streaming/internal/framepath"
	"github.com/velo-go/velo/streaming/internal/inlet"
	"github.com/velo-go/velo/streaming/internal/mux"
	"github.com/velo-go/velo/streaming/internal/tcpframe"
)

// Streams between workers (lib/velo/src/streaming/control.rs and
// tcp_transport.rs of the reference).
//
// The producer asks the anchor's owner with _anchor_attach (JSON bodies
// from package wire), offering the transport keys it can connect on:
// "messenger-mux-v2" first when its mux is on, then its frame transport's
// ("tcp-stream" by default). An owner with the mux answers the mux when
// offered (mux_attach.go); otherwise it binds the stream on its per-stream
// listener and answers its frame transport's key and a routing session id
// (attach.go). The per-stream path, its listener, readers, producer
// streams, heartbeats and control messages, is package
// internal/framepath, over an ext.FrameTransport (internal/tcpframe by
// default); this file is the node that ties it and the mux to the Manager
// and its messenger.
//
// The listener's address is not in the attach answer: as in the
// reference, it is an entry of the owner's WorkerAddress under the frame
// transport's key ("tcp-stream": the format of the messenger TCP
// transport's entry). The producer reads it from the PeerInfo it
// registered for the owner.

// AcceptWindow is how long a stream bound by _anchor_attach on the
// per-stream path waits for its producer's connection (the reference's
// fixed ACCEPT_TIMEOUT). After it the anchor sees ErrSenderDropped. A mux
// bind waits ReservationConfig.AcceptWindow instead.
const AcceptWindow = 60 * time.Second

// defaultHeartbeatInterval is the heartbeat interval this node answers an
// attach with unless WithHeartbeatInterval says otherwise: the producer
// beats at it, and the stream's reader ends a stream silent for
// detectionMultiplier of them (framepath/watchdog.go).
const defaultHeartbeatInterval = wire.DefaultHeartbeatIntervalMS * time.Millisecond

type nodeConfig struct {
	mux          MuxConfig
	muxOnly      bool
	listen       string
	acceptWindow time.Duration
	heartbeat    time.Duration
	res          ReservationConfig
	log          *slog.Logger
	metrics      *metrics.VeloMetrics
	streams      tcpframe.Net       // the TCP frame transport's network
	tls          *tls.Config        // the TCP frame transport's TLS, nil for plain TCP
	frames       ext.FrameTransport // WithFrameTransport; nil: TCP
	traced       bool               // WithTraceEvents (tracing.go)
}

// WithStreamListenAddr sets the address of the per-stream listener
// ("127.0.0.1:0" unless set), which the frame transport's Listen gets. Its
// actual address is advertised, so port 0 is fine.
func WithStreamListenAddr(addr string) ManagerOption {
	return ManagerOption{func(c *nodeConfig) { c.listen = addr }}
}

// WithStreamTLS runs the per-stream path over TLS with cfg, one config for
// both ends as tcp.WithTLS has it: the listener serves with it (mutual TLS
// when its ClientAuth asks for client certificates), and each stream this
// node opens dials with a copy of it, whose empty ServerName becomes the
// owner's host. The listener is then advertised under "tls-stream", not
// "tcp-stream", so a node that speaks the path in the clear never dials
// it, and this node opens streams only to owners that advertise
// "tls-stream" (over the mux, which rides the messenger's transport,
// nothing changes). velo.New sets it from a TCP or gRPC transport built WithTLS.
// A node built WithFrameTransport ignores it.
func WithStreamTLS(cfg *tls.Config) ManagerOption {
	return ManagerOption{func(c *nodeConfig) { c.tls = cfg }}
}

// WithFrameTransport runs the node's per-stream path over ft instead of
// TCP: its listener is ft's (advertised under ft.Key()), the attaches it
// serves answer ft.Key(), and the streams it opens dial with ft. Both ends
// of a stream must use frame transports of the same key: a producer whose
// node runs another fails its attach with a clear error (ext.ErrNoEndpoint
// when the owner advertises no listener under its key, ErrTransportMismatch
// when the owner answers another key). The mux, when both ends have it, is unaffected.
// See docs/transports.md, "Frame transports for streams".
func WithFrameTransport(ft ext.FrameTransport) ManagerOption {
	return ManagerOption{func(c *nodeConfig) { c.frames = ft }}
}

// WithStreamLogger sends the manager's warnings to l instead of
// slog.Default().
func WithStreamLogger(l *slog.Logger) ManagerOption {
	return ManagerOption{func(c *nodeConfig) { c.log = l }}
}

// withAcceptWindow shortens the accept window, for tests.
func withAcceptWindow(d time.Duration) ManagerOption {
	return ManagerOption{func(c *nodeConfig) { c.acceptWindow = d }}
}

// withStreamNet sets the per-stream path's network, for tests: an
// in-memory one lets two nodes run inside a testing/synctest bubble.
func withStreamNet(n tcpframe.Net) ManagerOption {
	return ManagerOption{func(c *nodeConfig) { c.streams = n }}
}

// remote is what a Manager from NewNodeManager has beyond the same-worker
// registry: the messenger, the ids it draws, the per-stream path and the
// mux.
type remote struct {
	// testAnswered, when set (tests only), runs as a waited attach's
	// answer arrives, before its stream opens.
	testAnswered func()

	m            *Manager
	mux          *mux.Mux // nil when the mux is off
	msg          *messenger.Messenger
	tcp          *framepath.Node // the per-stream path, listener or not
	acceptWindow time.Duration
	heartbeat    time.Duration // answered to attaches, and watched by readers
	log          *slog.Logger
	streamKey    string // the per-stream path's key: its frame transport's
	// offered is offeredKeys once register has run (the mux is fixed
	// then): every attach request names them, and a list made per
	// attach was an allocation of each.
	offered []string
	// ids draws routing sessions and producer stream ids: random, since
	// a peer presents them back as authority (ids.go).
	ids *idSource

	// muxOwners are the owner instances that answered an attach with the
	// mux: the next attach to one may be pipelined (mux_pipeline.go).
	muxOwners sync.Map // ext.InstanceID → struct{}

	renewRequests atomic.Uint64 // _anchor_renew requests served (tests count batches)
}

// NewNodeManager returns the Manager of msg's node, able to stream to and
// from other workers. It registers the attach and control handlers and the
// mux's batch handlers, and, unless WithMuxOnly, listens for per-stream
// streams on its frame transport (TCP unless WithFrameTransport; on
// 127.0.0.1:0 unless WithStreamListenAddr says otherwise) and advertises
// the listener under the transport's key ("tcp-stream") in msg's address. Call it
// before handing out msg's PeerInfo, so that peers learn the listener.
// Close stops it.
func NewNodeManager(msg *messenger.Messenger, opts ...ManagerOption) (*Manager, error) {
	cfg := nodeConfig{listen: "127.0.0.1:0", acceptWindow: AcceptWindow, streams: tcpframe.TCP{}, res: DefaultReservationConfig()}
	for _, o := range opts {
		if o.apply != nil {
			o.apply(&cfg)
		}
	}
	if cfg.log == nil {
		cfg.log = slog.Default()
	}
	if cfg.heartbeat < time.Millisecond {
		cfg.heartbeat = defaultHeartbeatInterval
	}
	cfg.heartbeat = cfg.heartbeat.Truncate(time.Millisecond) // what the wire carries
	if cfg.muxOnly && (cfg.mux.Disabled || muxDisabledByEnv()) {
		return nil, errMuxOnlyDisabled
	}
	ft := cfg.frames
	if ft == nil {
		ft = tcpframe.New(cfg.streams, cfg.tls)
	}
	key := string(ft.Key())
	var ln ext.FrameListener
	if !cfg.muxOnly {
		var err error
		if ln, err = listenStreams(msg, ft, cfg.listen); err != nil {
			return nil, err
		}
	}
	m := newManager(msg.WorkerID(), &cfg)
	r := &remote{
		m: m, msg: msg, acceptWindow: cfg.acceptWindow, log: cfg.log,
		heartbeat: cfg.heartbeat, ids: newIDSource(), streamKey: key,
	}
	r.tcp = framepath.New(framepath.Config{
		Host: (*tcpHost)(r), Owner: m.owner, Listener: ln, Transport: ft,
		AcceptWindow: cfg.acceptWindow, Heartbeat: cfg.heartbeat, Log: cfg.log,
		Metrics: m.met, NextID: r.ids.next,
	})
	m.remote = r
	if err := r.register(cfg); err != nil {
		m.Close() // closes the listener and the mux
		return nil, err
	}
	if mx := r.mux; mx != nil {
		// The mux's goodbyes ride the messenger: it must close before the
		// messenger stops its transports, not after (Manager.Close comes
		// too late when the node shuts down).
		msgrx.OnTeardown(msg, mx.Close)
	}
	r.tcp.Start()
	return m, nil
}

// register registers the node's stream handlers and starts the mux.
func (r *remote) register(cfg nodeConfig) error {
	// Inline on the reader goroutine: the attach takes only short locks and
	// never waits, and a hand-off to another goroutine cost more than the
	// handler on a small machine; it is on the path of every stream's setup.
	err := msgrx.RegisterSystem(r.msg, messenger.UnaryHandler(wire.AnchorAttachHandler, r.onAttach, messenger.WithInline()))
	if err == nil {
		err = r.registerControl()
	}
	if err == nil {
		err = r.startMux(cfg.mux, cfg.metrics)
	}
	if err == nil {
		err = msgrx.RegisterSystem(r.msg, messenger.UnaryHandler(wire.MPSCAnchorAttachHandler, r.onMPSCAttach, messenger.WithInline())) // as _anchor_attach
	}
	if err == nil {
		r.offered = r.offeredKeys()
	}
	return err
}

// listenStreams opens the per-stream listener of ft and advertises it
// under ft's key.
func listenStreams(msg *messenger.Messenger, ft ext.FrameTransport, addr string) (ext.FrameListener, error) {
	ln, err := ft.Listen(addr)
	if err != nil {
		return nil, err
	}
	if err := msgrx.AdvertiseAddress(msg, ft.Key(), ln.Entry()); err != nil {
		ln.Close()
		return nil, err
	}
	return ln, nil
}

// streamAddr is the network address of the per-stream listener, or nil for a
// Manager from NewManager or one built WithMuxOnly.
func (m *Manager) streamAddr() net.Addr {
	if m.remote == nil {
		return nil
	}
	return m.remote.tcp.Addr()
}

// stopRemote stops the streams between workers (Close calls it): the mux
// first, then the per-stream path, which closes its listener and every
// connection and waits for its goroutines.
func (m *Manager) stopRemote() {
	r := m.remote
	if r == nil {
		return
	}
	if r.mux != nil {
		r.mux.Close()
	}
	r.tcp.Close()
}

// peerLost ends at once what the node holds for a peer whose node is
// gone: its mux binds and slots, this node's per-stream senders to its
// anchors, and the per-stream binds whose connection never came.
func (r *remote) peerLost(w ext.WorkerID, orderly bool) {
	if mx := r.mux; mx != nil {
		mx.DropBinds(w)
		if orderly {
			// A peer that shut down in order sent its mux goodbye before
			// its transports stopped; it travels on the peer's own
			// connection, which may trail the end of ours a little. The
			// goodbye's closes, not epoch death, should end its streams.
			time.AfterFunc(msgwire.PeerShutdownGrace, func() { mx.PeerLost(w) })
		} else {
			mx.PeerLost(w)
		}
	}
	r.tcp.PeerLost(w)
}

// tcpHost is the node as the per-stream path's Host. A type of its own,
// so that the Host methods do not join remote's.
type tcpHost remote

func (h *tcpHost) Anchor(localID uint64) *inlet.State { return h.m.lookup(localID) }

func (h *tcpHost) Post(w ext.WorkerID, handler string, body []byte) error {
	inst, ok := msgrx.InstanceOf(h.msg, w)
	if !ok {
		return nil // the worker is gone: nobody to tell
	}
	return msgrx.Post(h.msg, inst, handler, body)
}

func (h *tcpHost) Stopped() <-chan struct{} { return msgrx.Stopped(h.msg) }
