package hub

import (
	"log/slog"
	"net"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"github.com/velo-go/velo"
	"github.com/velo-go/velo/ext"
	"github.com/velo-go/velo/hub/protocol"
	"github.com/velo-go/velo/hub/store"
)

// Version is reported by GET /v1/hub.
const Version = "0.1.0"

// Hub is one hub: its two listeners, its store, its velo node (when it
// runs one) and its extensions. Build it with New, start it with Serve,
// stop it with Shutdown.
type Hub struct {
	cfg    Config
	log    *slog.Logger
	id     protocol.HubID
	st     store.Store
	veloOp []velo.Option // nil: the hub runs without velo
	plan   *plan
	dir    *directory // the built-in services extension
	auth   *Authority
	// epoch numbers registrations; it starts past every stored epoch.
	epoch atomic.Uint64

	// lock is the one registration lock: a token channel so that a
	// waiter can give up after lock_timeout_ms or at shutdown.
	lock     chan struct{}
	stopping chan struct{} // closed when Shutdown starts: no new registration

	node *velo.Node // nil without velo
	// transports are the keys of the node's own address: a registrant's
	// address must name one of them.
	transports map[ext.TransportKey]struct{}
	pinned     *store.Entry

	lnPublic, lnControl net.Listener
	srvPublic, srvCtrl  *http.Server
	reqs                inflight // HTTP handlers running

	rem     removals // the removal hook's queue, drained by the lifecycle goroutine
	settles settles  // writes whose outcome is unknown, settled by the lifecycle goroutine
	chg     changes  // tells the instance watchers (the page) that something changed

	taskMu      sync.Mutex
	tasksClosed bool
	tasks       sync.WaitGroup // registration and unregistration tasks
	servers     sync.WaitGroup // the two http.Server.Serve goroutines
	// inTx is the owner whose registration transaction runs (nil: none);
	// the heartbeat does not probe it.
	inTx      atomic.Pointer[ext.InstanceID]
	loops     sync.WaitGroup // heartbeat, lifecycle, continuity watch
	loopsStop chan struct{}

	stopOnce sync.Once
	stopped  chan struct{}
	stopErr  error

	probe   prober     // the heartbeat's velo probe; a seam for tests
	timing  httpTiming // HTTP timeouts; tests shorten them
	started bool
}

// httpTiming holds the HTTP server timeouts: slow-loris protection.
type httpTiming struct {
	readHeader time.Duration
	read       time.Duration
	idle       time.Duration
	keepAlive  time.Duration // SSE comment interval of a service watch
	// settleRetry is how often the lifecycle asks the store again about a
	// write whose outcome it could not learn.
	settleRetry time.Duration
}

func defaultTiming() httpTiming {
	return httpTiming{
		readHeader:  5 * time.Second,
		read:        30 * time.Second,
		idle:        120 * time.Second,
		keepAlive:   protocol.WatchKeepAlive,
		settleRetry: time.Second,
	}
}

// Option configures New. Only this package makes them.
type Option struct{ apply func(*options) }

type options struct {
	st      store.Store
	velo    []velo.Option
	useVelo bool
	bundles []Bundle
	exts    []Extension
	log     *slog.Logger
	timing  *httpTiming
	probe   prober
}

// WithStore makes the hub keep its registrations in st. Without it the
// hub uses an InMemoryStore with the config's registrant TTL. A store
// given to a hub that failed to start can go to another hub.
func WithStore(st store.Store) Option { return Option{func(o *options) { o.st = st }} }

// WithVelo makes the hub run a velo node built with opts (at least a
// transport) and the store as its discovery. With velo, the hub probes
// its registrants, registers each as a velo peer, and advertises its own
// pinned entry. Without it, the hub only does discovery and liveness is
// the store's TTL.
func WithVelo(opts ...velo.Option) Option {
	return Option{func(o *options) { o.velo = append(o.velo, opts...); o.useVelo = true }}
}

// WithBundle adds a bundle of extensions.
func WithBundle(b Bundle) Option {
	return Option{func(o *options) { o.bundles = append(o.bundles, b) }}
}

// WithExtension adds one extension that no bundle holds.
func WithExtension(e Extension) Option {
	return Option{func(o *options) { o.exts = append(o.exts, e) }}
}

// WithLogger sends the hub's warnings to l instead of slog.Default().
func WithLogger(l *slog.Logger) Option { return Option{func(o *options) { o.log = l }} }

// ID is this run's hub id; it changes at every start.
func (h *Hub) ID() protocol.HubID { return h.id }

// Authority answers which registration a credential belongs to.
func (h *Hub) Authority() *Authority { return h.auth }

// Store is the hub's store.
func (h *Hub) Store() store.Store { return h.st }

// Node is the hub's velo node, nil without WithVelo or before Serve.
func (h *Hub) Node() *velo.Node { return h.node }

// PublicAddr is the public listener's address, once Serve bound it.
func (h *Hub) PublicAddr() net.Addr { return addrOf(h.lnPublic) }

// ControlAddr is the control listener's address, once Serve bound it.
func (h *Hub) ControlAddr() net.Addr { return addrOf(h.lnControl) }

func addrOf(l net.Listener) net.Addr {
	if l == nil {
		return nil
	}
	return l.Addr()
}

// probeIntervalMS is the interval of the hub's probes, which a
// registration's answer tells the registrant; 0 without velo (no probes).
func (h *Hub) probeIntervalMS() int64 {
	if h.node == nil {
		return 0
	}
	return h.cfg.heartbeatInterval().Milliseconds()
}

// hubPeer is the hub's own velo peer, nil without velo.
func (h *Hub) hubPeer() *ext.PeerInfo {
	if h.node == nil {
		return nil
	}
	p := h.node.PeerInfo()
	return &p
}
