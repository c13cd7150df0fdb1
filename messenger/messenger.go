// Package messenger sends active messages: requests to named handlers on
// remote instances, in four patterns (fire-and-forget, sync, unary, typed
// unary), with spawn or ordered dispatch, deadlines taken from the caller's
// context, and a graceful drain. The root package velo wraps it as Node.
// A node may call its own instance id: the request takes the path a
// peer's would, from admission to the answer, without a transport
// (loopback.go).
//
// A handler's error reaches the caller as a *velo.RemoteError. A
// *velo.Error (made with velo.NewError, velo.Errorf or velo.NewSentinel)
// carries a velo.Code, numbered as gRPC numbers its codes, across the
// wire: the caller reads it with velo.ErrorCode or errors.As, and
// errors.Is matches a sentinel by its reason. Those names live in velo,
// the error vocabulary's public home.
//
// What only velo's own packages call (system handlers, posting on lanes,
// staging, slot-addressed replies, hooks on peer loss and teardown) is
// unexported here and reached through internal/msgrx.
package messenger

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"

	"github.com/velo-go/velo/ext"
	"github.com/velo-go/velo/internal/msgerr"
	"github.com/velo-go/velo/internal/msgrx/hook"
	"github.com/velo-go/velo/internal/msgwire"
	"github.com/velo-go/velo/internal/peerevent"
	"github.com/velo-go/velo/internal/tracing"
	"github.com/velo-go/velo/metrics"
)

// Config builds a Messenger.
type Config struct {
	// Transports to start; at least one. The node's address is theirs merged.
	Transports []ext.Transport
	// Discovery, when set, finds peers that were not registered by hand.
	Discovery ext.PeerDiscovery
	// Metrics, when set, receives the Transport and Messenger families.
	Metrics *metrics.VeloMetrics
	// SystemHandlerMetrics gives each of velo's own handlers (names starting
	// with '_') its own per-handler series. Without it they are counted
	// together under handler="_system". Either way a
	// handler's series appear when it first runs, not when it is registered.
	SystemHandlerMetrics bool
	// ResponseSlots bounds calls waiting for an answer at once (default and
	// most 65536: a response id names its slot in 16 bits).
	ResponseSlots int
	// OnUndelivered, when set, hears of every message a transport admitted
	// and then failed or discarded (a write error, a lost connection, the
	// teardown's grace running out): the peer, the handler the message was
	// for ("" for a reply) and why. It runs on the goroutine that met the
	// failure, possibly inside another Send, so it must return quickly.
	// Bytes already handed to the kernel when a connection dies are lost
	// without a report: no transport can know of them.
	OnUndelivered func(peer ext.InstanceID, handler string, err error)
	// OnPeerEvent, when set, hears when a peer greeted this node's
	// handshake, was lost, restarted or shut down (see velo.PeerEvent). It runs
	// on the goroutine that noticed the change and must not block.
	OnPeerEvent func(peerevent.PeerEvent)
	// MaxRunningHandlers caps the handlers this node runs at once, over all
	// handlers (default DefaultMaxRunningHandlers). A request that arrives
	// at the cap is answered with ErrOverloaded at once. Inline handlers,
	// which run on the connection's reader, and velo's own system handlers
	// are neither counted nor refused.
	MaxRunningHandlers int
	// SpawnQueueRequests and SpawnQueueBytes bound the requests that wait
	// in a spawn-mode handler's queue (defaults DefaultSpawnQueueRequests
	// and DefaultSpawnQueueBytes; negative: no bound). A connection's
	// reader that finds the queue over either bound after a read stops
	// reading until the handler's workers took it down to half of both, so
	// the socket pushes back on the sender rather than the queue growing
	// on the heap. It stops only while the pool can start workers for what
	// waits, as the handlers that run may wait on answers that the same
	// reader carries: under WithMaxConcurrent the queue keeps growing
	// instead, and at MaxRunningHandlers what comes is refused
	// (ErrOverloaded).
	SpawnQueueRequests int
	SpawnQueueBytes    int
	// MaxDiscoveredPeers bounds the peers kept from discovery (default
	// DefaultMaxDiscoveredPeers). Past it, the least recently used one is
	// forgotten (UnregisterPeer); its next call resolves it again.
	MaxDiscoveredPeers int
	// Logger receives the messenger's warnings (an ordered lane over its
	// depth, requests refused for overload); nil means slog.Default().
	Logger *slog.Logger
	// TracerProvider, when set, turns tracing on: calls to user handlers
	// run under client spans whose context travels in the request's
	// headers, and handlers under server spans that join it (tracing.go).
	// Nil (the default) traces nothing and adds nothing to the wire.
	TracerProvider trace.TracerProvider
	// TracePropagator writes and reads the trace context in the headers;
	// nil is W3C Trace Context (traceparent, tracestate), as the Rust
	// reference writes it. It matters only with TracerProvider.
	TracePropagator propagation.TextMapPropagator
}

// DefaultMaxRunningHandlers is the node's cap on running handlers unless
// Config.MaxRunningHandlers sets one. It is a guard against running out of
// memory, not a tuning knob: each running handler holds a goroutine (a few
// KiB of stack, more if it grows) and its request, so 10,000 bound that to
// tens of MiB, while leaving room for handlers that mostly wait (on a call
// to another node, on I/O), where thousands in flight are normal. A cap
// based on GOMAXPROCS would refuse such waiting handlers long before the
// CPU is busy.
const DefaultMaxRunningHandlers = 10_000

// DefaultSpawnQueueRequests and DefaultSpawnQueueBytes are the bounds of a
// spawn-mode handler's queue unless Config sets others. A queue of 1,024
// small requests is a few hundred microseconds of work for the workers
// that take it, enough to keep them busy while the reader catches up, and
// it keeps the read buffers that queued requests alias to a few MiB.
const (
	DefaultSpawnQueueRequests = 1024
	DefaultSpawnQueueBytes    = 4 << 20
)

// Messenger is one node's messaging engine.
type Messenger struct {
	id      ext.InstanceID
	wid     ext.WorkerID
	infoMu  sync.Mutex
	info    ext.PeerInfo
	state   *ext.ShutdownState
	adapter *ext.TransportAdapter
	trs     []ext.Transport
	// fireHeaders caches fireHeader's bytes by handler name.
	fireHeaders sync.Map
	disc        ext.PeerDiscovery
	met         *metrics.VeloMetrics
	// sysMet: the series velo's handlers share, made with the first one
	// (under regMu); sysSeries: Config.SystemHandlerMetrics.
	sysMet    *handlerMetrics
	sysSeries bool

	peers    *peerTable
	handlers atomic.Pointer[map[string]*registered]
	regMu    sync.Mutex
	slots    *slotTable

	stopped atomic.Bool
	// onReaders counts the requests running on a reader that holds its
	// connection (spawnPool.tryInline): a call made while one runs has
	// them handed on (handOnReaders), since its answer may come on one.
	onReaders atomic.Int32
	shutOnce  sync.Once
	shutDone  chan struct{}
	shutErr   error
	done      chan struct{} // closed at teardown: ordered lanes stop

	// The node's cap on running handlers (dispatch.go).
	maxRuns      int64
	spawnQueue   queueLimits  // the bounds of each spawn pool's queue (backpressure.go)
	runs         atomic.Int64 // handlers running now
	overloadWarn logLimiter
	holdWarn     logLimiter // identity.go: a proving connection's hold overflowed
	starvedMu    sync.Mutex
	starved      []*registered // spawn pools waiting for a place under the cap
	nStarved     atomic.Int32
	log          *slog.Logger

	handshakes atomic.Int64 // _hello calls made, for tests
	unmatched  atomic.Int64 // replies that matched no waiting call

	undelivered map[string]func([]byte, error) // by handler; guarded by regMu
	lostHooks   []func(ext.InstanceID, error)  // guarded by regMu
	downHooks   []func()                       // OnTeardown's; guarded by regMu
	// draining holds the workers that refused a request with a drain echo:
	// when their connections close, that is a shutdown, not a crash.
	draining  sync.Map // ext.WorkerID → struct{}
	lostCalls atomic.Int64
	greeted   sync.Map     // ext.WorkerID → struct{}: the callers that ran the handshake with this instance
	gate      identityGate // the peer each inbound connection speaks for (identity.go)
	answers   answerConns  // the peer whose answers each inbound connection carries (shutdown_quiet.go)
	selfConn  ext.ConnID   // the connection id of calls to itself, which no transport stamps (loopback.go)
	tlsConns  sync.Map     // ext.ConnID -> *tls.ConnectionState of inbound TLS connections (peertls.go)
	hctx      handlerCtxs  // the context.Context of running handlers that asked for one (handlerctx.go)
	// testOnChallenge sees each identity challenge this node answers (tests).
	testOnChallenge atomic.Pointer[func([]byte)]

	undeliveredFn func(ext.InstanceID, string, error)
	peerEvents    *peerEventQueue
	peerEventLog  logBucket
	lostByPeer    sync.Map // ext.InstanceID → *atomic.Int64: admitted messages failed or discarded
	disco         discoveryState
	stager        atomic.Pointer[hook.Stager] // transparent staging (stager.go); nil when off
	// life ends at teardown, with done: the parent of the fetches of staged requests.
	life    context.Context
	endLife context.CancelFunc
	tr      *tracing.Tracer // nil: tracing off (tracing.go)

	// viewEvents keeps the last peer events, for PeerViews and
	// RecentPeerEvents (view.go).
	viewEvents eventRing
}

// New starts the transports and returns a running messenger.
func New(ctx context.Context, cfg Config) (*Messenger, error) {
	if len(cfg.Transports) == 0 {
		return nil, errors.New("velo: at least one transport is needed")
	}
	if cfg.ResponseSlots == 0 {
		cfg.ResponseSlots = maxSlots
	}
	if cfg.ResponseSlots < 1 || cfg.ResponseSlots > maxSlots {
		return nil, fmt.Errorf("velo: response slots %d out of range [1, %d]", cfg.ResponseSlots, maxSlots)
	}
	if cfg.MaxRunningHandlers == 0 {
		cfg.MaxRunningHandlers = DefaultMaxRunningHandlers
	}
	cfg.SpawnQueueRequests = queueBound(cfg.SpawnQueueRequests, DefaultSpawnQueueRequests)
	cfg.SpawnQueueBytes = queueBound(cfg.SpawnQueueBytes, DefaultSpawnQueueBytes)
	if cfg.MaxRunningHandlers < 0 {
		return nil, fmt.Errorf("velo: max running handlers must be at least 1, got %d", cfg.MaxRunningHandlers)
	}
	m := &Messenger{
		id: ext.NewInstanceID(), state: ext.NewShutdownState(), disc: cfg.Discovery, met: cfg.Metrics,
		undeliveredFn: cfg.OnUndelivered,
		peerEvents:    newPeerEventQueue(cfg.OnPeerEvent),
		peers:         newPeerTable(), shutDone: make(chan struct{}), done: make(chan struct{}),
		maxRuns: int64(cfg.MaxRunningHandlers), log: cfg.Logger,
		spawnQueue: queueLimits{requests: cfg.SpawnQueueRequests, bytes: cfg.SpawnQueueBytes},
	}
	m.wid = m.id.WorkerID()
	m.selfConn = ext.NewConnID()
	m.sysSeries = cfg.SystemHandlerMetrics
	m.life, m.endLife = context.WithCancel(context.Background())
	m.disco.found, m.disco.limit = map[ext.InstanceID]struct{}{}, cfg.MaxDiscoveredPeers
	if m.disco.limit <= 0 {
		m.disco.limit = DefaultMaxDiscoveredPeers
	}
	m.tr = tracing.New(cfg.TracerProvider, cfg.TracePropagator, m.id) // nil: off (tracing.go)
	var exhausted func()
	if m.met != nil {
		exhausted = m.met.ResponseSlotExhausted.Inc
	}
	m.slots = newSlotTable(cfg.ResponseSlots, exhausted)
	if m.met != nil {
		m.slots.asyncDone = m.met.PendingResponses.Dec
	}
	empty := map[string]*registered{}
	m.handlers.Store(&empty)
	m.adapter = ext.NewTransportAdapter(m.state, ext.AdapterConfig{
		OnMessagesHandoff: m.onMessages,
		OnFrame:           m.onFrame,
		PayloadInto:       m.payloadInto,
		DrainExempt:       m.drainExempt,
		OnConnClosed:      m.onConnClosed,
		OnConnTLS:         m.onConnTLS,
	})
	m.adapter.SetSendErrorHandler(m.onSendError)
	m.adapter.SetPeerLostHandler(m.onPeerLost)
	m.adapter.SetPeerConnectedHandler(m.onPeerConnected)
	m.trs = append([]ext.Transport(nil), cfg.Transports...)
	sortByPriority(m.trs)
	addr := ext.WorkerAddress{}
	for i, tr := range m.trs {
		if m.met != nil {
			tr.SetObservability(m.met.Transport(tr.Key()))
		}
		ext.BindInstance(tr, m.id)
		ep, err := tr.Start(ctx, m.adapter)
		if err == nil {
			addr, err = addr.Merge(ext.WorkerAddress{tr.Key(): ep})
		}
		if err != nil {
			for _, started := range m.trs[:i+1] {
				started.Shutdown()
			}
			return nil, fmt.Errorf("velo: start transport %q: %w", tr.Key(), err)
		}
	}
	addr[msgwire.ProofKey] = []byte{1} // this node answers identity challenges (identity.go)
	m.warnUnconfirmable()
	m.info = ext.PeerInfo{InstanceID: m.id, Address: addr}
	m.peers.put(m.newSelfPeer()) // calls to itself (loopback.go)
	m.registerSystemHandlers()
	if err := m.startWatch(); err != nil {
		for _, tr := range m.trs {
			tr.Shutdown()
		}
		return nil, err
	}
	return m, nil
}

// InstanceID of this node.
func (m *Messenger) InstanceID() ext.InstanceID { return m.id }

// WorkerID of this node.
func (m *Messenger) WorkerID() ext.WorkerID { return m.wid }

// PeerInfo is what another node needs to reach this one.
func (m *Messenger) PeerInfo() ext.PeerInfo {
	m.infoMu.Lock()
	defer m.infoMu.Unlock()
	return m.info
}

// advertiseAddress adds an entry to this node's address, for a subsystem
// that listens on its own (the per-stream TCP listener of package
// streaming, under "tcp-stream"). Peers learn it from PeerInfo and the
// handshake, so call it before PeerInfo is handed out. A key that is
// already in the address with another endpoint is an error.
func (m *Messenger) advertiseAddress(key ext.TransportKey, endpoint []byte) error {
	m.infoMu.Lock()
	defer m.infoMu.Unlock()
	addr, err := m.info.Address.Merge(ext.WorkerAddress{key: endpoint})
	if err != nil {
		return err
	}
	m.info.Address = addr
	return nil
}

// peerInfoOf returns the PeerInfo registered for a worker id: how a
// subsystem finds a peer's address entries (a streaming endpoint).
func (m *Messenger) peerInfoOf(w ext.WorkerID) (ext.PeerInfo, bool) {
	if w == m.wid {
		return m.PeerInfo(), true // its own entry has no address: this one is current
	}
	if p, ok := m.peers.getWorker(w); ok {
		return p.info, true
	}
	return ext.PeerInfo{}, false
}

// Register adds a handler. Names starting with '_' are reserved.
func (m *Messenger) Register(h Handler) error { return m.register(h, false) }

// registerSystem adds a handler whose name starts with '_'. It is for
// velo's own subsystems (events, streams), not for applications.
func (m *Messenger) registerSystem(h Handler) error {
	if !strings.HasPrefix(h.name, "_") {
		return fmt.Errorf("velo: system handler %q must start with '_'", h.name)
	}
	return m.register(h, true)
}

// logger is where the messenger's warnings go.
func (m *Messenger) logger() *slog.Logger {
	if m.log != nil {
		return m.log
	}
	return slog.Default()
}

// instanceOf returns the instance registered for a worker id.
func (m *Messenger) instanceOf(w ext.WorkerID) (ext.InstanceID, bool) { return m.peers.byWorker(w) }

// stoppedChan is closed once teardown begins: subsystems fail their waits then.
func (m *Messenger) stoppedChan() <-chan struct{} { return m.done }

func (m *Messenger) register(h Handler, system bool) error {
	if err := validName(h.name, system); err != nil {
		return err
	}
	if h.err != nil {
		return fmt.Errorf("velo: handler %q: %w", h.name, h.err)
	}
	if h.fn == nil {
		return fmt.Errorf("velo: handler %q has no function", h.name)
	}
	m.regMu.Lock()
	defer m.regMu.Unlock()
	old := *m.handlers.Load()
	if _, dup := old[h.name]; dup {
		return fmt.Errorf("%w: %q", ErrDuplicateHandler, h.name)
	}
	next := copyMap(old)
	next[h.name] = m.newRegistered(h, system)
	m.handlers.Store(&next)
	return nil
}

// Handlers lists the user handlers registered here.
func (m *Messenger) Handlers() []string {
	var out []string
	for name := range *m.handlers.Load() {
		if !strings.HasPrefix(name, "_") {
			out = append(out, name)
		}
	}
	return out
}

// RegisterPeer makes a peer reachable on every transport both sides have.
// The primary route is the compatible transport of highest priority.
func (m *Messenger) RegisterPeer(info ext.PeerInfo) error {
	if info.InstanceID == m.id {
		return errors.New("velo: cannot register this node as its own peer")
	}
	var primary ext.Transport
	var errs []error
	for _, tr := range m.trs {
		if _, ok := info.Address[tr.Key()]; !ok {
			continue
		}
		if err := tr.Register(info); err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", tr.Key(), err))
			continue
		}
		if primary == nil {
			primary = tr
		}
	}
	if primary == nil {
		return fmt.Errorf("velo: peer %s shares no transport with this node: %w", info.InstanceID, errors.Join(errs...))
	}
	_, proves := info.Address[msgwire.ProofKey]
	r, ok := primary.(ext.OwnerRetainer)
	retains := ok && r.RetainsOwners()
	np := &peer{info: info, primary: primary, proves: proves, retains: retains}
	if ref, ok := primary.(ext.FrameRefSender); ok && retains {
		np.ref = ref
	}
	if old := m.peers.put(np); old != nil && old.primary != primary {
		old.primary.Unregister(info.InstanceID)
	}
	return nil
}

// UnregisterPeer forgets a peer on every transport. It is cheap and
// idempotent; a later send fails as to a peer never registered. This
// node's own id is not a peer and is left alone.
func (m *Messenger) UnregisterPeer(id ext.InstanceID) {
	if id == m.id {
		return
	}
	m.peers.remove(id)
	m.disco.forget(id)
	// A peer forgotten for good keeps no mark of its goodbye either: a node
	// whose peers come and go would otherwise hold one per peer it ever
	// saw shut down. A new registration greets it afresh.
	m.draining.Delete(id.WorkerID())
	for _, tr := range m.trs {
		tr.Unregister(id)
	}
}

func (m *Messenger) route(ctx context.Context, target ext.InstanceID) (*peer, error) {
	if p, ok := m.peers.get(target); ok {
		if p.restarted.Load() && m.disc != nil {
			return m.rediscover(ctx, p)
		}
		if p.discovered.Load() {
			p.lastUse.Store(time.Now().UnixNano()) // for the bound on discovered peers
		}
		m.resolution("registered", "success")
		return p, nil
	}
	if m.disc == nil {
		m.resolution("unknown", "error")
		return nil, fmt.Errorf("%w: %s", ErrPeerNotRegistered, target)
	}
	if err := m.DiscoverAndRegisterPeer(ctx, target); err != nil {
		m.resolution("discovery", "error")
		return nil, err
	}
	m.resolution("discovery", "success")
	p, _ := m.peers.get(target)
	return p, nil
}

func (m *Messenger) resolution(path, outcome string) {
	if m.met != nil && path != "registered" {
		m.met.ClientResolution.WithLabelValues(path, outcome).Inc()
	}
}

// CallOption adjusts one call.
type CallOption func(*callOptions)

type callOptions struct {
	op      string
	headers map[string]string
	inject  map[string]string // the trace context (tracing.go)
}

// WithHeaders attaches headers to a call (values of at most 1 KiB, 16 KiB encoded).
func WithHeaders(h map[string]string) CallOption {
	return func(o *callOptions) { o.headers = h }
}

// withOp names the operation a call serves ("rendezvous get"): a remote
// failure's text then starts with it (RemoteError.Op) instead of the
// handler's name, which for a library's system handler means nothing to
// its user. It sends nothing.
func withOp(op string) CallOption {
	return func(o *callOptions) { o.op = op }
}

// opOf is the op WithOp set in opts, "" for none.
func opOf(opts []CallOption) string {
	var co callOptions
	for _, o := range opts {
		o(&co)
	}
	return co.op
}

// nameOp puts the op of opts, if any, in a RemoteError.
func nameOp(err error, opts []CallOption) {
	if op := opOf(opts); op != "" {
		msgerr.NameOp(err, op)
	}
}

// Send is fire-and-forget: it returns once a transport took the message.
func (m *Messenger) Send(ctx context.Context, target ext.InstanceID, handler string, payload []byte, opts ...CallOption) error {
	if len(opts) == 0 && m.tr == nil && !m.wouldStage(payload) {
		return m.sendPlain(ctx, target, handler, payload)
	}
	_, err := m.request(ctx, target, handler, payload, msgwire.FireAndForget, opts)
	return err
}

// sendPlain is request for a message with no options, not traced and too
// small to stage: the same steps, without the calls that would find
// nothing to do. Two call levels and the staging check were a twentieth
// of a pipelined fire-and-forget message's cost to send.
func (m *Messenger) sendPlain(ctx context.Context, target ext.InstanceID, handler string, payload []byte) error {
	if _, err := m.prepare(handler, nil); err != nil {
		return err
	}
	p, err := m.route(ctx, target)
	if err != nil {
		return err
	}
	_, err = m.requestPrepared(ctx, p, target, handler, payload, msgwire.FireAndForget, nil, nil)
	return err
}

// sendError is the error of a send that a transport refused. When the
// peer had said it was shutting down, the error also matches
// ErrShuttingDown: that refusal is its shutdown, not a fault.
func (m *Messenger) sendError(handler string, target ext.InstanceID, err error) error {
	if m.refusedByShutdown(target, err) {
		err = fmt.Errorf("%w: %w", ErrShuttingDown, err)
	}
	return fmt.Errorf("velo: send %q to %s: %w", handler, target, err)
}

// refusedByShutdown says whether a request that a transport refused or
// could not write to target met the target's orderly shutdown: the peer
// said it was going (draining), or the transport's error says so itself.
// The second matters because a lane that dies after a goodbye fails its
// queued frames at once, and the node may hear of the loss (and mark the
// peer draining) only after: a request failed then never reached the
// peer, which admits nothing after its goodbye.
func (m *Messenger) refusedByShutdown(target ext.InstanceID, err error) bool {
	if _, ok := m.draining.Load(target.WorkerID()); ok {
		return true
	}
	return errors.Is(err, ext.ErrPeerShutdown)
}

// systemOnly refuses a user handler name in the calls that skip the
// handshake: a node serves user handlers only to callers that greeted it.
func systemOnly(call, handler string) error {
	if !strings.HasPrefix(handler, "_") {
		return fmt.Errorf("velo: %s is for system handlers ('_' names), not %q", call, handler)
	}
	return nil
}

// post is Send that never waits: it hands the message to the transport and
// returns, even when the peer's send channel is full (the message then
// waits in the transport's admission gate). Only a message that could not
// be handed over at all returns an error. System subsystems use it where a
// stalled peer must not hold up the caller (event completions); it skips
// the handshake, so it takes only system handler names.
func (m *Messenger) post(target ext.InstanceID, handler string, payload []byte) error {
	_, err := m.postLaneOutcome(target, 0, handler, payload)
	return err
}

// postLane is Post on one of the ordered lanes the transport keeps to
// target (0 <= lane < Lanes(target)): messages on one lane arrive in the
// order they were posted; lanes are not ordered against each other.
func (m *Messenger) postLane(target ext.InstanceID, lane int, handler string, payload []byte) error {
	_, err := m.postLaneOutcome(target, lane, handler, payload)
	return err
}

// postLaneOutcome is PostLane that also returns the transport's outcome:
// Admitted, or Pending when the message waits in the lane's admission gate
// (a congested peer). A caller that must know the message reached the
// send channel, or that it was refused after all, waits on the outcome.
func (m *Messenger) postLaneOutcome(target ext.InstanceID, lane int, handler string, payload []byte, opts ...CallOption) (ext.SendOutcome, error) {
	if err := systemOnly("Post", handler); err != nil {
		return ext.SendOutcome{}, err
	}
	hb, err := m.prepare(handler, opts)
	if err != nil {
		return ext.SendOutcome{}, err
	}
	p, ok := m.peers.get(target)
	if !ok {
		return ext.SendOutcome{}, fmt.Errorf("%w: %s", ErrPeerNotRegistered, target)
	}
	// A payload over the staging threshold goes by handle, as a request's
	// does; the receiver fetches it before the handler runs. It has no
	// deadline: it stays staged until the receiver has it.
	// The proof protocol's bodies never are: they must arrive as sent, on
	// the connection they are about, and the fetch would need the proof.
	// Nor are those to this node itself, which cross no wire.
	var staged string
	if handler != proveHandler && handler != proofHandler && !p.loop {
		if hb, payload, staged, err = m.stageRequest(context.Background(), msgwire.FireAndForget, payload, hb, opts); err != nil {
			return ext.SendOutcome{}, err
		}
	}
	f := requestFrame(msgwire.FireAndForget, msgwire.ResponseID{Lo: uint64(m.wid)}, handler, hb, payload)
	// A proof goes ahead of what waits at a new connection's fence: it is
	// what gets the connection confirmed (ext.ConnConfirmer).
	f.Urgent = handler == proofHandler
	out, err := m.postFrame(p, target, lane, handler, f)
	if err != nil && staged != "" {
		m.loadStager().Discard(staged)
	}
	return out, err
}

// postFrame hands a fire-and-forget frame to the transport of p, on lane.
func (m *Messenger) postFrame(p *peer, target ext.InstanceID, lane int, handler string, f ext.Frame) (ext.SendOutcome, error) {
	var out ext.SendOutcome
	var err error
	if lane == 0 {
		out, err = p.primary.Send(target, f)
	} else {
		out, err = p.primary.SendOnLane(target, lane, f)
	}
	if err != nil {
		return ext.SendOutcome{}, m.sendError(handler, target, err)
	}
	return out, nil
}

// postLaneOwned is PostLaneOutcome for a payload that owner's reference
// keeps alive: the payload is not copied. The frame carries owner to the
// transport, which retains it while it holds the bytes (ext.Owner); the
// caller keeps its own reference and releases it when the call returns.
// It is for system subsystems that reuse their send buffers (the mux's
// batches). It never stages: the caller keeps payloads under the staging
// threshold (StagingThreshold) and the transport's message size. A
// transport that is not an ext.OwnerRetainer gets a copy.
func (m *Messenger) postLaneOwned(target ext.InstanceID, lane int, handler string, payload []byte, owner ext.Owner) (ext.SendOutcome, error) {
	if err := systemOnly("Post", handler); err != nil {
		return ext.SendOutcome{}, err
	}
	// No options: prepare validates and adds no header bytes.
	hb, err := m.prepare(handler, nil)
	if err != nil {
		return ext.SendOutcome{}, err
	}
	p, ok := m.peers.get(target)
	if !ok {
		return ext.SendOutcome{}, fmt.Errorf("%w: %s", ErrPeerNotRegistered, target)
	}
	var f ext.Frame
	if r, ok := p.primary.(ext.OwnerRetainer); ok && r.RetainsOwners() {
		f = ext.Frame{Type: ext.Message, Header: m.fireHeader(handler), Payload: payload, Owner: owner}
	} else {
		// A transport that may keep the bytes without a reference gets a
		// copy, so that the caller's buffer is free when this returns.
		f = requestFrame(msgwire.FireAndForget, msgwire.ResponseID{Lo: uint64(m.wid)}, handler, hb, payload)
	}
	return m.postFrame(p, target, lane, handler, f)
}

// fireHeader is the request header of a fire-and-forget post to handler
// with no headers of its own. It is the same bytes on every call, so it is
// made once per handler and shared: a transport only reads a frame's
// header. The mux posts one batch per lane this way, so a batch costs no
// header allocation.
func (m *Messenger) fireHeader(handler string) []byte {
	if h, ok := m.fireHeaders.Load(handler); ok {
		return h.([]byte)
	}
	h := appendRequestHeader(make([]byte, 0, fixedHeaderLen+len(handler)+2), msgwire.FireAndForget, msgwire.ResponseID{Lo: uint64(m.wid)}, handler, nil)
	m.fireHeaders.Store(handler, h)
	return h
}

// laneCount is how many ordered lanes the transport to target keeps; for a
// target not registered (or the zero InstanceID), the most that any of the
// node's transports keeps. It is at least 1.
func (m *Messenger) laneCount(target ext.InstanceID) int {
	if p, ok := m.peers.get(target); ok {
		return max(1, p.primary.Lanes(target))
	}
	n := 1
	for _, t := range m.trs {
		n = max(n, t.Lanes(target))
	}
	return n
}

// Sync waits until the remote handler has run; its error comes back as a
// *velo.RemoteError. A staged payload is lent, as Unary's is.
func (m *Messenger) Sync(ctx context.Context, target ext.InstanceID, handler string, payload []byte, opts ...CallOption) error {
	_, err := m.request(ctx, target, handler, payload, msgwire.AckNack, opts)
	return err
}

// Unary returns the remote handler's answer. The deadline of ctx bounds the
// whole call; without one, no timer is armed. A payload over the staging
// threshold is lent to the stager, not copied (stageLent): before Unary
// returns, however it ends, the transport finishes with the chunks it
// already served from it, which may take it past the deadline.
func (m *Messenger) Unary(ctx context.Context, target ext.InstanceID, handler string, payload []byte, opts ...CallOption) ([]byte, error) {
	return m.request(ctx, target, handler, payload, msgwire.UnaryResponse, opts)
}

// largePayload is the size above which a request's payload gets a buffer
// of its own instead of sharing the header's.
const largePayload = 64 << 10

// requestFrame builds a request frame that owns its bytes. A call can
// return before the transport has written its frame (fire-and-forget,
// UnaryAsync, a timeout while the frame waits in the admission gate), and
// callers reuse their buffer once a call returns, so the payload is copied:
// into the header's allocation when small (no extra allocation), into its
// own when large.
func requestFrame(rt msgwire.ResponseType, id msgwire.ResponseID, handler string, hb, payload []byte) ext.Frame {
	return requestFrameDeadline(rt, id, handler, hb, payload, time.Time{})
}

// requestFrameDeadline is requestFrame for a call whose context ends at dl
// (zero: none), which the request carries (DeadlineHeader) in the same
// allocation.
func requestFrameDeadline(rt msgwire.ResponseType, id msgwire.ResponseID, handler string, hb, payload []byte, dl time.Time) ext.Frame {
	hlen := fixedHeaderLen + len(handler) + 2 + len(hb)
	if !dl.IsZero() {
		hlen += deadlineEntryMax
	}
	if len(payload) > largePayload {
		return ext.Frame{Type: ext.Message, Header: appendRequestHeaderDeadline(make([]byte, 0, hlen), rt, id, handler, hb, dl), Payload: bytes.Clone(payload)}
	}
	buf := appendRequestHeaderDeadline(make([]byte, 0, hlen+len(payload)), rt, id, handler, hb, dl)
	hlen = len(buf)
	buf = append(buf, payload...)
	return ext.Frame{Type: ext.Message, Header: buf[:hlen:hlen], Payload: buf[hlen:]}
}

// pooledRequestFrame is requestFrameDeadline in a pooled buffer (sendBuf)
// when the frame is small and p's transport retains owners; otherwise it
// is requestFrameDeadline's own allocation. The caller releases the frame
// once Send returns. TCP and UDS copy a small frame into their write batch
// within Send, so the buffer is back in the pool by then, and a small
// request costs no allocation (one per message was a twentieth of a
// fire-and-forget message's cost, with the collector's share).
func pooledRequestFrame(p *peer, rt msgwire.ResponseType, id msgwire.ResponseID, handler string, hb, payload []byte, dl time.Time) ext.Frame {
	if !p.retains || !fitsSendBuf(handler, hb, payload) {
		return requestFrameDeadline(rt, id, handler, hb, payload, dl)
	}
	sb := sendBufs.Get().(*sendBuf)
	sb.fill(rt, id, handler, hb, payload, dl)
	return sb.f
}

// fitsSendBuf reports whether a request is sure to fit a sendBuf.
func fitsSendBuf(handler string, hb, payload []byte) bool {
	return fixedHeaderLen+len(handler)+2+len(hb)+deadlineEntryMax+len(payload) <= sendBufSize
}

// fill writes a request into s, which holds the caller's reference, and
// points s.f at it.
func (s *sendBuf) fill(rt msgwire.ResponseType, id msgwire.ResponseID, handler string, hb, payload []byte, dl time.Time) {
	s.refs.Store(1)
	buf := s.header(rt, id, handler, hb, dl)
	hlen := len(buf)
	// s.b keeps its array (frames here fit its capacity): only the
	// bytes are written, so no pointer is stored per request.
	buf = append(buf, payload...)
	s.f.Header, s.f.Payload = buf[:hlen:hlen], buf[hlen:len(buf):len(buf)]
}

// sendRequest builds a request and hands it to p's transport. A small one
// to a transport that takes frames by pointer (ext.FrameRefSender) is
// built in a pooled buffer and passed as a pointer to the frame that
// buffer holds: no copy of the frame on the way down.
//
// follows is ext.Frame.Follows: other callers send right after this one.
func sendRequest(p *peer, target ext.InstanceID, rt msgwire.ResponseType, id msgwire.ResponseID, handler string, hb, payload []byte, dl time.Time, follows bool) (ext.SendOutcome, error) {
	if p.ref != nil && fitsSendBuf(handler, hb, payload) {
		sb := sendBufs.Get().(*sendBuf)
		sb.fill(rt, id, handler, hb, payload, dl)
		sb.f.Follows = follows
		out, err := p.ref.SendRef(target, &sb.f)
		sb.Release() // the caller's reference: the transport holds its own
		return out, err
	}
	f := pooledRequestFrame(p, rt, id, handler, hb, payload, dl)
	f.Follows = follows
	out, err := p.primary.Send(target, f)
	f.Release() // the caller's reference: the transport holds its own
	return out, err
}

// header writes a request header at the start of s.b and returns it. A
// request like the last one built in s (the same handler and deadline, no
// headers of its own: a caller's run of messages under one context, or
// calls in flight under one) finds that header still there, since nothing
// writes a pooled buffer but this: only the response id, when it differs
// (each call's slot has its own), and the time left are written again, in
// place, unless the digits grew or shrank in number; without a deadline,
// nothing else is. Encoding the whole header anew was a seventh of a
// fire-and-forget message's cost to send, and a twentieth of a call's
// with 64 in flight, whose ids all differ.
func (s *sendBuf) header(rt msgwire.ResponseType, id msgwire.ResponseID, handler string, hb []byte, dl time.Time) []byte {
	h := &s.last
	if h.n != 0 && len(hb) == 0 && dl == h.dl && rt == h.rt && handler == h.handler {
		if id != h.id {
			// Every request header starts schema, type, id (appendRequestHeader).
			b := s.b[:h.n]
			binary.LittleEndian.PutUint64(b[2:], id.Lo)
			binary.LittleEndian.PutUint64(b[10:], id.Hi)
			h.id = id
		}
		if dl.IsZero() {
			return s.b[:h.n] // no deadline: nothing changes, and no clock is read
		}
		digits := s.digits.left.n
		s.digits.left.appendDecimal(s.b[:h.leftAt], budgetMicros(dl))
		if s.digits.left.n == digits {
			return s.b[:h.n]
		}
	}
	s.encodes++
	buf := appendRequestHeaderDigits(s.b[:0], rt, id, handler, hb, dl, &s.digits)
	*h = lastHeader{}
	if len(hb) == 0 && cap(buf) == cap(s.b) && (dl.IsZero() || s.digits.leftAt != 0) {
		*h = lastHeader{n: len(buf), leftAt: s.digits.leftAt, rt: rt, id: id, handler: handler, dl: dl}
	}
	return buf
}

// lastHeader is what the last header written in a sendBuf was made of.
type lastHeader struct {
	n       int // its length; 0: nothing to reuse
	leftAt  int // where the digits of the time left start
	rt      msgwire.ResponseType
	id      msgwire.ResponseID
	handler string
	dl      time.Time
}

// sendBufSize is the capacity of a pooled request buffer, and so the
// largest request built in one.
const sendBufSize = 4 << 10

// sendBuf is a pooled request buffer, an ext.Owner: it goes back to the
// pool when the last reference is released.
type sendBuf struct {
	refs    atomic.Int32
	b       []byte         // its array is never replaced
	f       ext.Frame      // the request in b, its Owner s (fill)
	digits  deadlineDigits // of the last deadline written in b (budget.go)
	last    lastHeader     // the header at the start of b
	encodes int            // headers encoded whole, for tests
}

var sendBufs = sync.Pool{New: func() any {
	s := &sendBuf{b: make([]byte, 0, sendBufSize)}
	s.f = ext.Frame{Type: ext.Message, Owner: s}
	return s
}}

func (s *sendBuf) Retain() {
	if s.refs.Add(1) <= 1 {
		panic("velo: a request buffer was retained after its release")
	}
}

func (s *sendBuf) Release() {
	switch n := s.refs.Add(-1); {
	case n == 0:
		sendBufs.Put(s)
	case n < 0:
		panic("velo: a request buffer was released more often than retained")
	}
}

// withoutStaging copies h without the staging keys and the deadline: only
// the messenger writes them, so a handler that forwards its headers never
// forwards them.
func withoutStaging(h map[string]string) map[string]string {
	out := make(map[string]string, len(h))
	for k, v := range h {
		if k != msgwire.StagedHandleHeader && k != msgwire.StagedBudgetHeader && k != msgwire.DeadlineHeader {
			out[k] = v
		}
	}
	return out
}

// prepare checks a call and encodes its headers before anything is sent.
func (m *Messenger) prepare(handler string, opts []CallOption) (hb []byte, err error) {
	if m.stopped.Load() {
		return nil, ErrShuttingDown
	}
	if err := validName(handler, true); err != nil {
		return nil, err
	}
	if len(opts) > 0 {
		co := new(callOptions)
		for _, o := range opts {
			o(co)
		}
		h := co.headers
		if _, ok := h[msgwire.StagedHandleHeader]; ok {
			h = withoutStaging(h)
		} else if _, ok := h[msgwire.StagedBudgetHeader]; ok {
			h = withoutStaging(h)
		} else if _, ok := h[msgwire.DeadlineHeader]; ok {
			h = withoutStaging(h)
		}
		if co.inject != nil {
			h = withInjected(h, co.inject)
		}
		if hb, err = msgwire.EncodeHeaders(h); err != nil {
			return nil, err
		}
	}
	return hb, nil
}

func (m *Messenger) request(ctx context.Context, target ext.InstanceID, handler string, payload []byte, rt msgwire.ResponseType, opts []CallOption) ([]byte, error) {
	var span trace.Span
	if m.tr != nil && tracing.Traced(handler) {
		ctx, span, opts = m.startClientSpan(ctx, rt, handler, target, opts)
	}
	resp, err := m.requestOpts(ctx, target, handler, payload, rt, opts)
	if err != nil && len(opts) > 0 {
		nameOp(err, opts)
	}
	if span != nil {
		tracing.End(span, err)
	}
	return resp, err
}

func (m *Messenger) requestOpts(ctx context.Context, target ext.InstanceID, handler string, payload []byte, rt msgwire.ResponseType, opts []CallOption) ([]byte, error) {
	if rt != msgwire.FireAndForget {
		m.callStarts()
	}
	hb, err := m.prepare(handler, opts)
	if err != nil {
		return nil, err
	}
	p, err := m.route(ctx, target)
	if err != nil {
		return nil, err
	}
	if p.loop {
		// A call to this node itself crosses no wire: nothing to stage.
		return m.requestPrepared(ctx, p, target, handler, payload, rt, hb, nil)
	}
	var staged string
	if rt != msgwire.FireAndForget {
		// The call returns only once the answer came or the caller gave
		// up, so the payload is lent, not copied, to the stager; the loan
		// ends before the call returns (stageLent).
		var withdraw func()
		if hb, payload, staged, withdraw, err = m.stageLent(ctx, rt, payload, hb, opts); err != nil {
			return nil, err
		}
		if withdraw != nil {
			return m.requestLentPayload(ctx, p, target, handler, payload, rt, hb, withdraw)
		}
	} else if hb, payload, staged, err = m.stageRequest(ctx, rt, payload, hb, opts); err != nil {
		return nil, err
	}
	if staged != "" {
		return m.requestStagedPayload(ctx, p, target, handler, payload, rt, hb, staged)
	}
	return m.requestPrepared(ctx, p, target, handler, payload, rt, hb, nil)
}

// The defers of a call's rarer paths live in functions of their own: a
// function with more returns and defers than the compiler inlines the
// defers of runs the runtime's deferreturn at every exit, whether a defer
// ran or not, which was a seventieth of a fire-and-forget message's cost.

// requestLentPayload is requestPrepared for a payload lent to the stager,
// withdrawn once the call ends.
func (m *Messenger) requestLentPayload(ctx context.Context, p *peer, target ext.InstanceID, handler string, payload []byte, rt msgwire.ResponseType, hb []byte, withdraw func()) ([]byte, error) {
	defer withdraw()
	return m.requestPrepared(ctx, p, target, handler, payload, rt, hb, nil)
}

// requestStagedPayload is requestPrepared for a payload staged as staged,
// discarded unless a transport admitted the request: until then nobody
// else can free it.
func (m *Messenger) requestStagedPayload(ctx context.Context, p *peer, target ext.InstanceID, handler string, payload []byte, rt msgwire.ResponseType, hb []byte, staged string) ([]byte, error) {
	sent := false
	defer func() {
		if !sent {
			m.loadStager().Discard(staged)
		}
	}()
	return m.requestPrepared(ctx, p, target, handler, payload, rt, hb, &sent)
}

// needsHello reports whether a request to handler must wait for this
// node's handshake with the peer. Every user handler does (the handshake
// is what tells a restarted peer from the one that was greeted), and so
// does every system request that waits for an answer: the peer can send
// an answer only to a node it has registered, which the handshake does.
// Without it, a Get from an owner that this node had registered by hand,
// but never called, waited for its deadline. Fire-and-forget system
// posts (mux batches, proofs, cancels) and the handshake itself need none.
func needsHello(handler string, rt msgwire.ResponseType) bool {
	if !strings.HasPrefix(handler, "_") {
		return true
	}
	return rt != msgwire.FireAndForget && handler != helloHandler
}

// requestPrepared sends a request whose headers and payload are final and
// waits for what rt asks for. *sent is set once a transport admitted it.
func (m *Messenger) requestPrepared(ctx context.Context, p *peer, target ext.InstanceID, handler string, payload []byte, rt msgwire.ResponseType, hb []byte, sent *bool) ([]byte, error) {
	if needsHello(handler, rt) {
		if err := m.ensureHello(ctx, p); err != nil {
			return nil, err
		}
	}
	if rt != msgwire.FireAndForget {
		return m.requestAnswered(ctx, p, target, handler, payload, rt, hb, sent)
	}
	dl, _ := ctx.Deadline() // it travels with the request (budget.go)
	out, err := sendRequest(p, target, rt, msgwire.ResponseID{Lo: uint64(m.wid)}, handler, hb, payload, dl, false)
	if err != nil {
		return nil, m.sendError(handler, target, err)
	}
	if sent != nil {
		*sent = true
	}
	if err := out.Wait(ctx); err != nil {
		if ctx.Err() != nil {
			return nil, ctxErr(ctx) // ErrRequestTimeout, as Unary says it
		}
		return nil, err
	}
	return nil, nil
}

// requestAnswered is requestPrepared for a request that waits for an
// answer (an ack or a response) in a slot of its own.
func (m *Messenger) requestAnswered(ctx context.Context, p *peer, target ext.InstanceID, handler string, payload []byte, rt msgwire.ResponseType, hb []byte, sent *bool) ([]byte, error) {
	idx, token, err := m.slots.acquire(ctx, target.WorkerID())
	if err != nil {
		return nil, err
	}
	defer m.slots.release(idx)
	return m.requestInSlot(ctx, p, target, handler, payload, rt, hb, sent, idx, token)
}

// requestInSlot is requestAnswered once the call holds slot idx, whose
// generation is token.
func (m *Messenger) requestInSlot(ctx context.Context, p *peer, target ext.InstanceID, handler string, payload []byte, rt msgwire.ResponseType, hb []byte, sent *bool, idx uint32, token uint64) ([]byte, error) {
	// The wait for a slot can outlast the connection the handshake
	// ran on: a call to a user handler greets again if it was lost.
	if !strings.HasPrefix(handler, "_") && !p.helloOK.Load() {
		if err := m.ensureHello(ctx, p); err != nil {
			return nil, err
		}
	}
	// Shutdown fails the busy slots after it sets stopped: a call that
	// took its slot too late for that sees stopped here instead.
	if m.stopped.Load() {
		return nil, ErrShuttingDown
	}
	id := msgwire.ResponseID{Lo: uint64(m.wid), Hi: token}
	if m.met != nil {
		m.met.PendingResponses.Inc()
		defer m.met.PendingResponses.Dec()
	}
	dl, budgeted := ctx.Deadline() // it travels with the request (budget.go)
	// Callers that a read of replies woke and that have not run yet send
	// their next requests right after this one, mostly: the transport
	// leaves this request to its writer then, to go out with theirs.
	_, err := sendRequest(p, target, rt, id, handler, hb, payload, dl, m.slots.resumingOthers())
	if err != nil {
		return nil, m.sendError(handler, target, err)
	}
	if sent != nil {
		*sent = true
	}
	r, err := m.slots.wait(ctx, idx)
	if err != nil {
		// The caller gave up: its handler need not run on.
		if shouldCancel(ctx, budgeted) {
			m.sendCancel(p, target, id)
		}
		return nil, err
	}
	if r.err != nil {
		nameHandler(r.err, handler)
		return nil, r.err
	}
	return r.payload, nil
}

// awaitReply waits for the reply to the call in slot idx.
func (m *Messenger) awaitReply(ctx context.Context, idx uint32, handler string) ([]byte, error) {
	r, err := m.slots.wait(ctx, idx)
	if err != nil {
		return nil, err
	}
	if r.err != nil {
		nameHandler(r.err, handler)
		return nil, r.err
	}
	return r.payload, nil
}

// handshakeWith runs the _hello exchange with target unless it already ran, so
// that target knows this node's address. A system subsystem that sends only
// '_' messages (which skip the handshake) calls it before asking target to
// answer back.
func (m *Messenger) handshakeWith(ctx context.Context, target ext.InstanceID) error {
	p, err := m.route(ctx, target)
	if err != nil {
		return err
	}
	return m.ensureHello(ctx, p)
}

// fireAndAwaitOp sends a fire-and-forget request whose body names a response
// slot, and waits for the Ack or Response sent to that slot. build gets the
// slot's id and returns the payload. This is how a protocol whose request is
// fire-and-forget but whose answer is awaited (the reference's event
// trigger requests) is spoken; ctx bounds the wait. Like Post it skips the
// handshake and takes only system handler names.
func (m *Messenger) fireAndAwaitOp(ctx context.Context, target ext.InstanceID, handler string, build func(msgwire.ResponseID) []byte, opts ...CallOption) ([]byte, error) {
	resp, err := m.fireAndAwait(ctx, target, handler, build)
	if err != nil && len(opts) > 0 {
		nameOp(err, opts)
	}
	return resp, err
}

func (m *Messenger) fireAndAwait(ctx context.Context, target ext.InstanceID, handler string, build func(msgwire.ResponseID) []byte) ([]byte, error) {
	if err := systemOnly("FireAndAwait", handler); err != nil {
		return nil, err
	}
	if _, err := m.prepare(handler, nil); err != nil {
		return nil, err
	}
	p, err := m.route(ctx, target)
	if err != nil {
		return nil, err
	}
	idx, token, err := m.slots.acquire(ctx, target.WorkerID())
	if err != nil {
		return nil, err
	}
	defer m.slots.release(idx)
	if m.stopped.Load() {
		return nil, ErrShuttingDown
	}
	if m.met != nil {
		m.met.PendingResponses.Inc()
		defer m.met.PendingResponses.Dec()
	}
	id := msgwire.ResponseID{Lo: uint64(m.wid), Hi: token}
	// The request header carries the same id (the reference puts a slot's
	// id in fire-and-forget requests too, and no receiver answers them), so
	// a write that fails after admission fails this wait at once.
	out, err := p.primary.Send(target, requestFrame(msgwire.FireAndForget, id, handler, nil, build(id)))
	if err != nil {
		return nil, m.sendError(handler, target, err)
	}
	if err := out.Wait(ctx); err != nil {
		return nil, err
	}
	return m.awaitReply(ctx, idx, handler)
}

// UnaryAsync is Unary without a goroutine waiting for the answer. It
// returns once the transport took the request, and done then runs exactly
// once, with the response or an error (the remote's, ErrRequestTimeout when
// ctx's deadline passes, context.Canceled, ErrShuttingDown, a send failure).
// When UnaryAsync itself returns an error, done never runs.
//
// done runs on whatever goroutine completes the call, most often the
// transport's reader for the connection the reply came on; never inside
// UnaryAsync, another call's send, or the goroutine running Shutdown. It
// must return quickly and never wait for another reply: while it runs,
// that connection reads nothing. Hand longer work to a goroutine. The
// response bytes are the callback's to keep, and the caller's payload
// buffer is free again once UnaryAsync returns.
//
// UnaryAsync never waits: when every response slot is busy it fails with
// ErrNoResponseSlot. The first call to a peer (which may need discovery and
// the handshake) moves to a goroutine of its own, so it is safe to call from
// a callback.
func (m *Messenger) UnaryAsync(ctx context.Context, target ext.InstanceID, handler string, payload []byte, done func(resp []byte, err error), opts ...CallOption) error {
	if m.tr != nil && done != nil && tracing.Traced(handler) {
		return m.tracedUnaryAsync(ctx, target, handler, payload, done, opts)
	}
	_, err := m.unaryAsyncCall(ctx, target, handler, payload, done, opts...)
	return err
}

// abandonCall completes the asynchronous call that token names (one
// unaryAsyncCall returned) with err, as if err had been its answer: its
// response slot is free again and its callback runs now, with err. An
// answer that comes later is discarded. It reports false when the call had
// completed already, or token names none. msgrx.AsyncCall wraps it.
func (m *Messenger) abandonCall(token uint64, err error) bool {
	return m.slots.deliver(token, reply{err: err})
}

// unaryAsyncCall is UnaryAsync, and names the call by its slot token so
// that the caller may abandon it without a context (a context that can
// end costs a watch per call). A first call to a peer, which waits for the
// handshake on a goroutine of its own, cannot be named: its token is 0,
// which names no call (a live token's generation is never 0).
func (m *Messenger) unaryAsyncCall(ctx context.Context, target ext.InstanceID, handler string, payload []byte, done func(resp []byte, err error), opts ...CallOption) (uint64, error) {
	if done == nil {
		return 0, errors.New("velo: UnaryAsync needs a callback")
	}
	m.callStarts()
	if len(opts) > 0 && opOf(opts) != "" {
		inner := done
		done = func(resp []byte, err error) {
			if err != nil {
				nameOp(err, opts)
			}
			inner(resp, err)
		}
	}
	hb, err := m.prepare(handler, opts)
	if err != nil {
		return 0, err
	}
	hello := needsHello(handler, msgwire.UnaryResponse)
	p, ok := m.peers.get(target)
	if !ok && m.disc == nil {
		return 0, fmt.Errorf("%w: %s", ErrPeerNotRegistered, target)
	}
	var staged string
	if !ok || !p.loop { // a call to this node itself crosses no wire: nothing to stage
		if hb, payload, staged, err = m.stageRequest(ctx, msgwire.UnaryResponse, payload, hb, opts); err != nil {
			return 0, err
		}
	}
	if ok && (!hello || p.helloOK.Load()) {
		token, err := m.sendAsync(ctx, p, target, handler, hb, payload, done, false, nil)
		if err = m.unstage(staged, err); err != nil {
			return 0, err
		}
		return token, nil
	}
	payload = bytes.Clone(payload) // the goroutine sends after this call returned
	go func() {
		p, err := m.route(ctx, target)
		if err == nil && hello {
			err = m.ensureHello(ctx, p)
		}
		if err == nil {
			_, err = m.sendAsync(ctx, p, target, handler, hb, payload, done, false, nil)
		}
		if m.unstage(staged, err) != nil {
			done(nil, err)
		}
	}()
	return 0, nil
}

// unstage frees the staged payload of a request that never left (err is
// not nil) and returns err. It is a method, not a closure over staged:
// the goroutine of a first call captures what it uses, so such a closure
// was moved to the heap on every call, also on the path that starts none.
func (m *Messenger) unstage(staged string, err error) error {
	if err != nil && staged != "" {
		m.loadStager().Discard(staged)
	}
	return err
}

// viewMin is the answer size from which a view call reads in place.
const viewMin = 16 << 10

// unaryAsyncView is UnaryAsync for a system handler ('_' name) on a
// registered peer, whose callback reads a successful answer where the
// transport received it: resp is valid only until done returns, and done
// runs on the transport's reader, so it copies what it keeps and returns
// quickly. It saves one copy of every answer (rendezvous pulls).
//
// into, when not nil, may be asked (on a transport's reader, under the
// call's lock: it must be quick and must not call the messenger) for a
// slice of n bytes to read a large answer of n bytes into, straight from
// the socket; then resp is that slice. It returns nil to take the answer
// the usual way. See slots_fill.go.
func (m *Messenger) unaryAsyncView(ctx context.Context, target ext.InstanceID, handler string, payload []byte, into func(n int) []byte, done func(resp []byte, err error)) error {
	if done == nil {
		return errors.New("velo: UnaryAsyncView needs a callback")
	}
	m.callStarts()
	if err := systemOnly("UnaryAsyncView", handler); err != nil {
		return err
	}
	hb, err := m.prepare(handler, nil)
	if err != nil {
		return err
	}
	p, ok := m.peers.get(target)
	if !ok {
		return fmt.Errorf("%w: %s", ErrPeerNotRegistered, target)
	}
	_, err = m.sendAsync(ctx, p, target, handler, hb, payload, done, true, into)
	return err
}

// sendAsync takes a slot for an asynchronous call and sends its request.
func (m *Messenger) sendAsync(ctx context.Context, p *peer, target ext.InstanceID, handler string, hb, payload []byte, done func([]byte, error), view bool, into func(int) []byte) (uint64, error) {
	token, ok := m.slots.acquireAsync(target.WorkerID(), handler, done, view, into)
	if !ok {
		return 0, ErrNoResponseSlot
	}
	if m.met != nil {
		m.met.PendingResponses.Inc()
	}
	// unsent takes the call back before anything went out, unless shutdown
	// completed it first (then done ran, and the call counts as started).
	unsent := func(err error) error {
		if !m.slots.cancelAsync(token) {
			return nil
		}
		if m.met != nil {
			m.met.PendingResponses.Dec()
		}
		return err
	}
	if m.stopped.Load() { // as in request: a slot taken after shutdown failed them all
		return 0, unsent(ErrShuttingDown)
	}
	id := msgwire.ResponseID{Lo: uint64(m.wid), Hi: token}
	dl, budgeted := ctx.Deadline()
	if p.loop {
		m.slots.holdAsync(token) // its answer may come inside Send (loopback.go)
	}
	// A small request goes in a pooled buffer, as a Unary's does: an
	// attach (streaming's _anchor_attach, one per stream) allocated a
	// frame of its own for every call.
	// No Follows hint: an asynchronous call is mostly made on a goroutine
	// that goes on with other work (a reader running a callback), so it is
	// written inline as before when the writer is idle.
	_, err := sendRequest(p, target, msgwire.UnaryResponse, id, handler, hb, payload, dl, false)
	if p.loop && m.slots.releaseAsync(token) {
		err = nil // it was answered (or refused): done runs, so the call started
	}
	if err != nil {
		return 0, unsent(m.sendError(handler, target, err))
	}
	// A context that can end is watched without a goroutine; one that
	// cannot (Background) costs nothing.
	if ctx.Done() != nil {
		m.slots.watch(token, context.AfterFunc(ctx, func() {
			if m.slots.deliver(token, reply{err: ctxErr(ctx)}) && shouldCancel(ctx, budgeted) {
				m.sendCancel(p, target, id) // the call ended here before its answer came
			}
		}))
	}
	return token, nil
}

// onMessages receives admitted requests on a transport's reader goroutine.
func (m *Messenger) onMessages(batch []ext.InboundMessage, h ext.Handoff) {
	hs := *m.handlers.Load()
	spawned := spawnBatch{h: h}
	defer spawned.finish()
	var cs *connState // the batch's connection (one read: one connection)
	var at arrival    // the batch's arrival (one read: one time)
	var scratch job   // where a job is built when no segment has room
	for i := range batch {
		msg := &batch[i]
		if m.met != nil {
			m.met.InboundDequeued.Inc()
		}
		// The job is built where it will most likely be queued: the next
		// slot of the segment being gathered (spawnBatch.slot).
		j := spawned.slot(&scratch)
		initJob(j, msg)
		if err := parseRequestHeaderInto(msg.Header, &j.hdr); err != nil {
			// Without a header there is nobody to answer: count and drop.
			m.countFailure("decode", "malformed_header")
			*j = job{}
			msg.Done()
			continue
		}
		hdr := &j.hdr
		if len(hdr.headers) != 0 {
			j.dl = headerDeadlineAt(hdr.headers, &at) // on arrival: the transit is spent
		}
		switch string(hdr.handler) {
		case proofHandler:
			for _, held := range m.onProof(*j) {
				m.dispatchOne(hs, &held, &spawned)
			}
			continue
		case proveHandler: // a challenge binds nothing: see identity.go
			m.dispatchOne(hs, j, &spawned)
			continue
		}
		switch m.admit(j, &cs) {
		case gateHeld:
			continue
		case gateDrop:
			j.done()
			continue
		case gateRefuse:
			m.refuseIdentity(*j)
			continue
		}
		m.dispatchOne(hs, j, &spawned)
	}
}

// initJob starts the job of msg in *j, a slot that may hold a job not
// kept: every field but the header, which the parse writes whole. Field by
// field, not *j = job{...}: the literal was built on the stack and copied
// over in 16-byte loads of the 8-byte stores just made, which stalled on
// them (a tenth of the reader's cost per message).
func initJob(j *job, msg *ext.InboundMessage) {
	j.payload = msg.Payload
	j.owner = msg.Owner
	j.guard = msg.Guard
	j.conn = msg.Conn
	j.dl = time.Time{}
	j.at = 0
}

// dispatchOne runs or queues one request whose sender the gate accepted.
// The job is copied where it is queued: *j is the caller's to reuse after.
func (m *Messenger) dispatchOne(hs map[string]*registered, j *job, spawned *spawnBatch) {
	hdr := &j.hdr
	// A read is mostly requests to one handler: the one gathered last is
	// a byte comparison away, cheaper than hashing the name.
	r := spawned.r
	if r == nil || string(hdr.handler) != r.name {
		r = hs[string(hdr.handler)]
	}
	if r == nil {
		m.countFailure("dispatch", "unknown_handler")
		m.replyUnknownHandler(*hdr)
		j.done()
		return
	}
	if hdr.handler[0] != '_' && !spawned.greetedBy(m, hdr.id.Worker()) {
		m.countFailure("dispatch", "not_greeted")
		m.reply(*hdr, r.name, nil, fmt.Errorf("%w: worker %s never greeted instance %s", ErrPeerRestarted, hdr.id.Worker(), m.id))
		j.done()
		return
	}
	if len(hdr.headers) != 0 && !onlyDeadline(hdr.headers) {
		if handle, budget, rest, ok := stagedHandle(hdr.headers); ok {
			// The payload is a handle: fetch it first, off the reader.
			go m.resolveStaged(r, *j, handle, budget, rest)
			return
		}
	}
	spawned.dispatch(r, j)
}

// drainExempt tells admission which requests pass during a drain.
func (m *Messenger) drainExempt(f ext.Frame) bool {
	hdr, err := parseRequestHeader(f.Header)
	if err != nil {
		return false
	}
	r := (*m.handlers.Load())[string(hdr.handler)]
	return r != nil && r.opts.drainExempt
}

// onFrame receives responses, acks, events and drain echoes.
func (m *Messenger) onFrame(f ext.Frame) {
	defer f.Release()
	switch f.Type {
	case ext.Response:
		id, outcome, hb, err := parseResponseHeader(f.Header)
		if err != nil {
			m.countFailure("response", "malformed")
			return
		}
		if f.Conn != 0 {
			m.noteAnswerConn(f.Conn, id.Hi)
		}
		var r reply
		if outcome == outcomeOK {
			// Only large answers are worth the slot lookup; a small one is
			// copied for a view call too, which is as correct.
			if len(f.Payload) >= viewMin && id.Lo == uint64(m.wid) && m.slots.wantsView(id.Hi) {
				// UnaryAsyncView: the callback reads the bytes before
				// this function releases the frame.
				r.payload = f.Payload
			} else {
				// The caller keeps the bytes; the read buffer goes back.
				r.payload = append(make([]byte, 0, len(f.Payload)), f.Payload...)
			}
		} else {
			re := &msgerr.RemoteError{Message: string(f.Payload)}
			re.Code, re.Reason = parseErrorHeaders(hb)
			r.err = re
		}
		m.complete(id, r)
	case ext.Ack:
		flags, id, err := parseAckHeader(f.Header)
		if err != nil || flags&ackFlagEvent != 0 {
			m.countFailure("response", "malformed")
			return
		}
		if f.Conn != 0 {
			m.noteAnswerConn(f.Conn, id.Hi)
		}
		var r reply
		if flags&ackFlagError != 0 {
			r.err = &msgerr.RemoteError{Message: string(f.Payload), Code: msgerr.Unknown}
		}
		m.complete(id, r)
	case ext.ShuttingDown:
		hdr, err := parseRequestHeader(f.Header)
		if err != nil || hdr.id.Lo != uint64(m.wid) || hdr.id.Hi == 0 {
			return
		}
		if f.Conn != 0 {
			m.noteAnswerConn(f.Conn, hdr.id.Hi)
		}
		if w, ok := m.slots.peerOf(hdr.id.Hi); ok {
			m.draining.Store(w, struct{}{}) // its connections will close soon: that is its shutdown
		}
		m.slots.deliver(hdr.id.Hi, reply{err: fmt.Errorf("%w: the remote refused %q", ErrShuttingDown, hdr.handler)})
	}
}

// complete hands a reply to the call it names. All 128 bits of the id must
// match: this node's WorkerID, a busy slot, and that slot's current random
// generation. Anything else is a late, duplicate or forged reply, counted
// and dropped.
func (m *Messenger) complete(id msgwire.ResponseID, r reply) {
	switch {
	case id.Lo != uint64(m.wid):
		m.countFailure("response", "misrouted")
	case !m.slots.deliver(id.Hi, r):
		m.countFailure("response", "late_or_unknown")
	default:
		return
	}
	m.unmatched.Add(1)
}

// unmatchedReplies is how many replies matched no waiting call: late ones
// (the caller gave up), duplicates, and forged ones.
func (m *Messenger) unmatchedReplies() int64 { return m.unmatched.Load() }

// onSendError fails the caller of a request that a transport admitted but
// could not write, instead of leaving it to its deadline.
func (m *Messenger) onSendError(target ext.InstanceID, f ext.Frame, err error) {
	m.countUndelivered(target, f, err)
	if f.Type != ext.Message {
		m.countFailure("response", "send_failed")
		return
	}
	hdr, perr := parseRequestHeader(f.Header)
	if perr != nil || hdr.id.Lo != uint64(m.wid) {
		return
	}
	if hdr.id.Hi == 0 {
		m.undeliveredFire(hdr, f.Payload, err)
		return
	}
	// This runs on whichever goroutine met the failure, often another
	// caller's Send: an asynchronous callback must not run there (nor inside
	// its own UnaryAsync), so the failure is delivered from a goroutine of
	// its own. Send failures are rare.
	if m.refusedByShutdown(target, err) {
		err = fmt.Errorf("%w: %w", ErrShuttingDown, err) // the peer said it was going
	}
	token, r := hdr.id.Hi, reply{err: fmt.Errorf("velo: request to %q was not sent: %w", hdr.handler, err)}
	go m.slots.deliver(token, r)
}

// onPeerLost runs when a transport lost its connection to a peer. Every
// call waiting on that peer fails at once with ErrPeerUnreachable (and
// ErrShuttingDown too when the peer said it was shutting down: a goodbye
// or a drain echo), and the next call
// runs the handshake again, which finds out whether the node at that
// address is still the same instance.
func (m *Messenger) onPeerLost(id ext.InstanceID, err error) {
	p, _ := m.peers.get(id)
	m.peerLost(id, p, err)
}

// peerLost is onPeerLost for a peer entry looked up by the caller (nil
// when there is none), which may have removed it from the table first.
func (m *Messenger) peerLost(id ext.InstanceID, p *peer, err error) {
	w := id.WorkerID()
	wasUp := false // greeted until now: only then is the loss news
	if p != nil {
		p.epoch.Add(1)
		wasUp = p.helloOK.Swap(false)
		p.connected.Store(false)
	}
	inOrder := errors.Is(err, ext.ErrPeerShutdown)
	if inOrder {
		m.draining.Store(w, struct{}{}) // what follows (refused dials) is its shutdown too
	} else if _, ok := m.draining.Load(w); ok {
		// It said goodbye or refused a request as draining before: this
		// loss (a refused dial, another lane's end) is that shutdown.
		inOrder = true
	}
	if inOrder {
		err = fmt.Errorf("%w: %w", ErrShuttingDown, err)
	}
	// A handler's request on a transport that names its connections ends
	// with that connection (onConnClosed); one on a transport that does
	// not has only this to go by.
	m.callerLost(w, true)
	if wasUp {
		// A dead peer that calls keep redialling loses its connection
		// again on every attempt; it is reported once, when it goes.
		m.notePeerEvent(lostEvent(id, err))
	}
	fail := func() {
		m.lostCalls.Add(int64(m.slots.failPeer(w, fmt.Errorf("velo: peer %s: %w", id, err))))
	}
	if inOrder {
		// The peer shut down in order: it answered what it accepted, but
		// its answers travel on its own connections to us, which may trail
		// the end of ours. What has no answer once they have all been read
		// was refused (shutdown_quiet.go).
		m.failAfterAnswers(w, fail)
	} else {
		fail()
	}
	m.regMu.Lock()
	hooks := m.lostHooks
	m.regMu.Unlock()
	for _, fn := range hooks {
		fn(id, err)
	}
}

// addPeerLostHook registers fn to hear when a transport lost its connection to
// a peer (err matches ErrPeerUnreachable). fn runs on the transport's
// goroutine and must not block.
func (m *Messenger) addPeerLostHook(fn func(peer ext.InstanceID, err error)) {
	m.regMu.Lock()
	defer m.regMu.Unlock()
	m.lostHooks = append(m.lostHooks[:len(m.lostHooks):len(m.lostHooks)], fn)
}

// callsFailedByPeerLoss is how many calls in flight failed because the
// connection to their peer was lost.
func (m *Messenger) callsFailedByPeerLoss() int64 { return m.lostCalls.Load() }

// countUndelivered counts a message the transport admitted and then failed
// or discarded, per peer, and tells Config.OnUndelivered.
func (m *Messenger) countUndelivered(target ext.InstanceID, f ext.Frame, err error) {
	c, ok := m.lostByPeer.Load(target)
	if !ok {
		c, _ = m.lostByPeer.LoadOrStore(target, new(atomic.Int64))
	}
	c.(*atomic.Int64).Add(1)
	if m.undeliveredFn == nil {
		return
	}
	handler := ""
	if f.Type == ext.Message {
		if hdr, perr := parseRequestHeader(f.Header); perr == nil {
			handler = string(hdr.handler)
		}
	}
	m.undeliveredFn(target, handler, err)
}

// Undelivered is how many messages to peer the transports admitted and
// then failed or discarded (requests, replies and acks alike). A sender
// cannot know of bytes that were in the kernel when a connection died.
func (m *Messenger) Undelivered(peer ext.InstanceID) int64 {
	if c, ok := m.lostByPeer.Load(peer); ok {
		return c.(*atomic.Int64).Load()
	}
	return 0
}

// watchUndelivered registers fn to hear of fire-and-forget messages to
// handler that a transport admitted but could not write (Send had already
// returned nil). fn gets a copy of the payload, on a goroutine of its own.
// A subsystem whose protocol is fire-and-forget (event subscriptions) uses
// it to fail what waits on such a message at once, not at its deadline.
func (m *Messenger) watchUndelivered(handler string, fn func(payload []byte, err error)) {
	m.regMu.Lock()
	defer m.regMu.Unlock()
	if m.undelivered == nil {
		m.undelivered = map[string]func([]byte, error){}
	}
	m.undelivered[handler] = fn
}

func (m *Messenger) undeliveredFire(hdr requestHeader, payload []byte, err error) {
	m.regMu.Lock()
	fn := m.undelivered[string(hdr.handler)]
	m.regMu.Unlock()
	if fn != nil {
		go fn(bytes.Clone(payload), err)
	}
}

// reply answers a request through this node's peer table: a remote that
// forgot the caller cannot answer it.
func (m *Messenger) reply(hdr requestHeader, handler string, resp []byte, err error) {
	m.replyOwned(hdr, resp, err, nil)
}

// replyOwned is reply for an answer that may live in the request's read
// buffer (a handler that answers with its own payload): the transport holds
// owner until the answer is written, so releasing the request cannot pull
// the memory from under the writer.
//
// A unary call is answered with a Response frame, a sync call with an Ack
// frame (a Nack when err is set); an error's text is the payload. An error
// that has a code (an *Error, ErrLaneFull and friends) goes as an error
// Response whose header map carries the code and the reason (wireCode),
// whatever the pattern: a Rust caller reads it as it reads a Nack, and a
// Go caller reads the code and matches the sentinel with errors.Is.
func (m *Messenger) replyOwned(hdr requestHeader, resp []byte, err error, owner ext.Owner) {
	m.answer(hdr, resp, err, owner, false)
}

// replyLent is replyOwned for an answer in memory that owner guards and
// that its owner wants back (Context.lendAnswer): a transport that does
// not retain owners, and so could not say when it is done with the bytes,
// gets a copy.
func (m *Messenger) replyLent(hdr requestHeader, resp []byte, err error, owner ext.Owner) {
	m.answer(hdr, resp, err, owner, true)
}

func (m *Messenger) answer(hdr requestHeader, resp []byte, err error, owner ext.Owner, lent bool) {
	if hdr.rtype == msgwire.FireAndForget {
		return
	}
	if err != nil {
		if code, reason, ok := wireCode(err); ok {
			m.sendReply(hdr.id, codedError(hdr.id, code, reason, err))
			return
		}
		resp, owner = []byte(err.Error()), nil
	}
	if len(resp) == 0 {
		owner = nil
	}
	var f ext.Frame
	switch hdr.rtype {
	case msgwire.UnaryResponse:
		outcome := byte(outcomeOK)
		if err != nil {
			outcome = outcomeErr
		}
		h := appendResponseHeader(make([]byte, 0, responseHeaderLen), hdr.id, outcome, nil)
		f = ext.Frame{Type: ext.Response, Header: h, Payload: resp, Owner: owner, Follows: hdr.follows}
	case msgwire.AckNack:
		if err == nil {
			resp, owner = nil, nil
		}
		f = ext.Frame{Type: ext.Ack, Header: appendAckHeader(make([]byte, 0, ackHeaderLen), hdr.id, err != nil), Payload: resp, Owner: owner, Follows: hdr.follows}
	default:
		return
	}
	if lent && f.Owner != nil {
		m.sendLentReply(hdr.id, f)
		return
	}
	m.sendReply(hdr.id, f)
}

// replyUnknownHandler answers a request for a handler this node does not
// have. The reference (server/dispatcher.rs) answers with a Nack whichever
// pattern the caller used; this node answers with an error Response that
// carries the code, which a Rust caller reads the same way (it waits on one
// slot for either kind of frame) and a Go caller matches as
// ErrUnknownHandler.
func (m *Messenger) replyUnknownHandler(hdr requestHeader) {
	m.replyOwned(hdr, nil, fmt.Errorf("%w: %q", ErrUnknownHandler, hdr.handler), nil)
}

// codedError is an error Response whose header map names the failure.
func codedError(id msgwire.ResponseID, code msgerr.Code, reason string, err error) ext.Frame {
	hb := appendErrorHeaders(make([]byte, 0, 32+len(reason)), code, reason)
	return ext.Frame{Type: ext.Response, Header: appendResponseHeader(nil, id, outcomeErr, hb), Payload: []byte(err.Error())}
}

// acknowledge answers a response id that arrived in a message body rather
// than a request header (how an event trigger request is answered): an Ack
// when err is nil. A failure with a code (an *Error, see wireCode) goes as
// an error Response whose header map carries the code and the reason, so a
// Go caller's errors.Is matches the sentinel; the reference reads that
// frame as it reads a Nack. A failure without a code is a Nack with err's
// text.
func (m *Messenger) acknowledge(id msgwire.ResponseID, err error) error {
	var f ext.Frame
	switch {
	case err == nil:
		f = ext.Frame{Type: ext.Ack, Header: appendAckHeader(make([]byte, 0, ackHeaderLen), id, false)}
	default:
		if code, reason, ok := wireCode(err); ok {
			f = codedError(id, code, reason, err)
		} else {
			f = ext.Frame{Type: ext.Ack, Header: appendAckHeader(make([]byte, 0, ackHeaderLen), id, true), Payload: []byte(err.Error())}
		}
	}
	if !m.sendReply(id, f) {
		return fmt.Errorf("%w: worker %s", ErrPeerNotRegistered, id.Worker())
	}
	return nil
}

// sendReply sends a reply frame to the worker named in id, through this
// node's peer table: a remote that forgot the caller cannot answer it.
func (m *Messenger) sendReply(id msgwire.ResponseID, f ext.Frame) bool {
	p, ok := m.peers.getWorker(id.Worker())
	if !ok {
		m.countFailure("response", "unknown_caller")
		return false
	}
	if _, err := p.primary.Send(p.info.InstanceID, f); err != nil {
		m.countFailure("response", "send_failed")
		return false
	}
	return true
}

// sendLentReply is sendReply for a frame whose Owner wants its bytes back
// (replyLent). The check is made on the transport the frame goes through.
func (m *Messenger) sendLentReply(id msgwire.ResponseID, f ext.Frame) bool {
	p, ok := m.peers.getWorker(id.Worker())
	if !ok {
		m.countFailure("response", "unknown_caller")
		return false
	}
	if r, ok := p.primary.(ext.OwnerRetainer); !ok || !r.RetainsOwners() {
		f.Payload, f.Owner = bytes.Clone(f.Payload), nil
	}
	if _, err := p.primary.Send(p.info.InstanceID, f); err != nil {
		m.countFailure("response", "send_failed")
		return false
	}
	return true
}

// BeginDrain refuses new requests (their callers fail fast with
// ErrShuttingDown) while accepted work, responses and drain-exempt
// handlers go on.
func (m *Messenger) BeginDrain() { m.state.BeginDrain() }

// Shutdown runs gate, drain, teardown and close, as http.Server.Shutdown
// does: it drains until no admitted request is in flight or ctx is done,
// whichever comes first, then stops. Requests still queued when ctx ends
// are refused with ErrShuttingDown. Concurrent calls wait for the first. It
// returns ctx's error when ctx cut the drain short. Pass an already done
// context to stop without draining.
func (m *Messenger) Shutdown(ctx context.Context) error {
	m.shutOnce.Do(func() {
		defer close(m.shutDone)
		m.shutErr = m.shutdown(ctx)
	})
	<-m.shutDone
	return m.shutErr
}

func (m *Messenger) shutdown(ctx context.Context) error {
	m.state.BeginDrain()                  // 1. gate
	drainErr := m.state.WaitForDrain(ctx) // 2. drain
	// What still runs is past the drain budget: its handlers' contexts
	// end, so that they can return.
	m.stopHandlerCtxs()
	// Subsystems say goodbye while the transports still carry it, and
	// before discovery withdraws this node (teardown_hooks.go).
	hooksDone := m.runTeardownHooks()
	defer hooksDone()
	// Withdrawn after the drain, not before: a peer that watches
	// discovery fails its calls to this node when the entry goes.
	m.unpublish()
	m.stopped.Store(true) // 3. teardown; before done closes: spawn workers read it (spawnPool.work)
	close(m.done)         // ordered lanes stop; their queued requests are refused
	m.closeGate()         // requests still waiting for a proof are refused
	m.endLife()           // fetches of staged requests stop
	var wg sync.WaitGroup
	for _, tr := range m.trs {
		wg.Add(1)
		go func(tr ext.Transport) {
			defer wg.Done()
			tr.Shutdown()
		}(tr)
	}
	wg.Wait()
	m.slots.failAll(ErrShuttingDown)
	m.answers.stopWaits() // what they would fail has failed just now
	m.stopWatch()
	for _, tr := range m.trs { // 4. close
		<-tr.Closed()
	}
	m.adapter.Close()
	// The user's callback gets what was noticed up to here, for a while:
	// one that blocks must not hold the shutdown.
	if dropped := m.peerEvents.close(time.Second); dropped > 0 {
		m.logger().Warn("velo: peer events dropped: the OnPeerEvent callback fell behind", "dropped", dropped)
	}
	return drainErr
}

// Done is closed once Shutdown has finished.
func (m *Messenger) Done() <-chan struct{} { return m.shutDone }
