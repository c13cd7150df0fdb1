package zmq

import (
	"context"
	"fmt"
	"io"
	"log"
	"sync"
	"sync/atomic"
	"time"

	"github.com/go-zeromq/zmq4"

	"github.com/velo-go/velo/ext"
)

// healthTimeout bounds a health check whose context has no deadline.
const healthTimeout = 5 * time.Second

// quiet is the logger given to zmq4, which otherwise prints a line per
// connection it fails to open.
var quiet = log.New(io.Discard, "", 0)

// Transport is the ZMQ messenger transport: one ROUTER end that receives
// (a listener with a goroutine per DEALER connection), one DEALER socket
// per (peer, lane) that sends.
type Transport struct {
	o        options
	id       ext.InstanceID
	bound    bool
	endpoint string
	adapter  *ext.TransportAdapter
	obs      atomic.Pointer[obsBox]

	router *router
	ctx    context.Context // ends when the teardown grace does
	cancel context.CancelFunc

	mu      sync.RWMutex
	peers   map[ext.InstanceID]*peer
	started bool
	closing atomic.Bool
	writers sync.WaitGroup // lane writers and the DEALER readers
	stop    chan struct{}  // closed when Shutdown begins
	grace   atomic.Int64   // unix nanos at which the teardown grace ends

	shutOnce sync.Once
	closed   chan struct{}

	malformed    atomic.Uint64
	drainRefused atomic.Uint64
	sendFailed   atomic.Uint64
	routeFailed  atomic.Uint64
	dials        atomic.Uint64
}

type obsBox struct{ ext.Observability }

type peer struct {
	endpoint string
	lanes    []*lane
}

// Stats counts what the transport refused or lost.
type Stats struct {
	// Malformed inbound messages: not [type, header, payload] after the
	// sender's identity (on either end), a type part that is not one known byte, or a frame above
	// the size cap. Each is dropped.
	Malformed uint64
	// DrainRefused requests refused because the node drains; each was
	// echoed ShuttingDown to the DEALER that sent it.
	DrainRefused uint64
	// SendFailed frames were admitted but not sent (unregister, shutdown
	// past its grace, a peer not reached within the send timeout, a send
	// error).
	SendFailed uint64
	// RouteFailed inbound frames found the node stopped.
	RouteFailed uint64
	// Dials counts DEALER connections made: the first to each (peer,
	// lane), then one per reconnect.
	Dials uint64
}

// New builds a ZMQ transport. It binds its ROUTER socket when the node
// starts it.
func New(opts ...Option) (*Transport, error) {
	var o options
	for _, opt := range opts {
		opt(&o)
	}
	o.defaults()
	if !validEndpoint(o.listen) {
		return nil, fmt.Errorf("zmq: listen endpoint %q: only tcp:// and ipc:// are supported", o.listen)
	}
	t := &Transport{
		o:      o,
		peers:  map[ext.InstanceID]*peer{},
		stop:   make(chan struct{}),
		closed: make(chan struct{}),
	}
	t.ctx, t.cancel = context.WithCancel(context.Background())
	t.obs.Store(&obsBox{ext.NopObservability{}})
	return t, nil
}

// Key is "zmq".
func (t *Transport) Key() ext.TransportKey { return Key }

// Priority orders transports when several reach a peer (default 60).
func (t *Transport) Priority() int { return t.o.priority }

// RetainsOwners is true: a queued frame keeps its Owner until sent.
func (t *Transport) RetainsOwners() bool { return true }

// BindInstance sets the identity of the DEALER sockets; the node calls it
// before Start. Without it the transport draws an id of its own.
func (t *Transport) BindInstance(id ext.InstanceID) { t.id, t.bound = id, true }

// Endpoint is the bound ROUTER endpoint, once started.
func (t *Transport) Endpoint() string { return t.endpoint }

// SetObservability installs the metrics handle.
func (t *Transport) SetObservability(o ext.Observability) {
	if o == nil {
		o = ext.NopObservability{}
	}
	t.obs.Store(&obsBox{o})
}

func (t *Transport) observe() ext.Observability { return t.obs.Load().Observability }

// Stats returns the transport's counters.
func (t *Transport) Stats() Stats {
	return Stats{
		Malformed:    t.malformed.Load(),
		DrainRefused: t.drainRefused.Load(),
		SendFailed:   t.sendFailed.Load(),
		RouteFailed:  t.routeFailed.Load(),
		Dials:        t.dials.Load(),
	}
}

// Start binds the ROUTER socket and returns the bound endpoint as the
// address entry. The socket accepts before Start returns.
func (t *Transport) Start(ctx context.Context, adapter *ext.TransportAdapter) ([]byte, error) {
	if !t.bound {
		t.id = ext.NewInstanceID()
	}
	t.adapter = adapter
	r, err := listen(t.o.listen, t.o.maxFrameSize, t.onMsg)
	if err != nil {
		return nil, fmt.Errorf("zmq: bind %s: %w", t.o.listen, err)
	}
	t.router = r
	t.endpoint = boundEndpoint(t.o.listen, r.addr())
	t.mu.Lock()
	t.started = true
	t.mu.Unlock()
	return []byte(t.endpoint), nil
}

// onMsg takes one inbound multipart message. zmq4 reads each part into
// its own allocation, so the frame needs no owner.
func (t *Transport) onMsg(c *zmq4.Conn, parts [][]byte) {
	obs := t.observe()
	f, ok := parseParts(parts, t.o.maxFrameSize)
	if !ok {
		t.malformed.Add(1)
		obs.Rejection(ext.RejectMalformed)
		return
	}
	obs.Frames(ext.Inbound, f.Type, ext.Accepted, 1, f.Len())
	if f.Type != ext.Message {
		t.route(f)
		return
	}
	switch t.adapter.AdmitMessage(f) {
	case ext.Draining:
		// The ROUTER answers the DEALER that sent the request, as the
		// reference does; a lost echo leaves the caller to its deadline.
		t.drainRefused.Add(1)
		obs.Rejection(ext.RejectDraining)
		c.SendMsg(zmq4.NewMsgFrom(echoParts(f.Header)...))
	case ext.Disconnected:
		t.routeFailed.Add(1)
		obs.Rejection(ext.RejectRouteFailed)
	}
}

func (t *Transport) route(f ext.Frame) {
	if !t.adapter.RouteFrame(f) {
		t.routeFailed.Add(1)
		t.observe().Rejection(ext.RejectRouteFailed)
	}
}

// Register learns a peer's ROUTER endpoint from its "zmq" entry. Its
// DEALER sockets dial when the first frame for them is queued.
func (t *Transport) Register(info ext.PeerInfo) error {
	ep, err := info.Address.Lookup(Key)
	if err != nil {
		return err
	}
	endpoint := string(ep)
	if !validEndpoint(endpoint) {
		return fmt.Errorf("zmq: peer %v: invalid endpoint %q (only tcp:// and ipc://)", info.InstanceID, endpoint)
	}
	t.mu.Lock()
	if t.closing.Load() || !t.started {
		t.mu.Unlock()
		return ext.ErrTransportClosed
	}
	old := t.peers[info.InstanceID]
	if old != nil && old.endpoint == endpoint {
		t.mu.Unlock()
		return nil
	}
	p := &peer{endpoint: endpoint}
	for k := range t.o.lanes {
		l := newLane(t, info.InstanceID, k, endpoint)
		p.lanes = append(p.lanes, l)
		t.writers.Add(1)
		go l.run()
	}
	t.peers[info.InstanceID] = p
	t.mu.Unlock()
	if old != nil {
		old.drop()
	} else {
		t.observe().RegisteredPeers(1)
	}
	return nil
}

// Unregister forgets a peer; what is queued for it is reported failed and
// its DEALER sockets close.
func (t *Transport) Unregister(id ext.InstanceID) {
	t.mu.Lock()
	p := t.peers[id]
	delete(t.peers, id)
	t.mu.Unlock()
	if p != nil {
		p.drop()
		t.observe().RegisteredPeers(-1)
	}
}

// drop fails the sends waiting in the peer's gates at once, so none is
// admitted behind the unregister, and stops its writers, closing the
// sockets under a send that is blocked on the peer.
func (p *peer) drop() {
	for _, l := range p.lanes {
		l.goneOnce.Do(func() { close(l.gone) })
		l.gate.Fail(ext.ErrConnectionClosed, func(f ext.Frame) { l.t.failed(l.target, f, ext.ErrConnectionClosed) })
		l.abort()
	}
}

func (t *Transport) peer(id ext.InstanceID) *peer {
	t.mu.RLock()
	p := t.peers[id]
	t.mu.RUnlock()
	return p
}

// Send sends on lane 0.
func (t *Transport) Send(target ext.InstanceID, f ext.Frame) (ext.SendOutcome, error) {
	return t.SendOnLane(target, 0, f)
}

// SendOnLane queues f for target's DEALER socket of that lane. A frame
// larger than MaxMessageSize is refused here with an ext.FrameTooLargeError.
func (t *Transport) SendOnLane(target ext.InstanceID, lane int, f ext.Frame) (ext.SendOutcome, error) {
	if t.closing.Load() {
		return ext.AdmittedOutcome, ext.ErrTransportClosed
	}
	p := t.peer(target)
	if p == nil {
		t.observe().Rejection(ext.RejectUnknownPeer)
		return ext.AdmittedOutcome, ext.ErrPeerNotRegistered
	}
	if lane < 0 || lane >= len(p.lanes) {
		return ext.AdmittedOutcome, ext.ErrLaneOutOfRange
	}
	if n := f.Len(); n > t.o.maxFrameSize {
		t.observe().Rejection(ext.RejectTooLarge)
		return ext.AdmittedOutcome, &ext.FrameTooLargeError{Size: n, Max: t.o.maxFrameSize}
	}
	return p.lanes[lane].send(f)
}

// Lanes is the number of lanes kept to a registered peer, 0 for another.
func (t *Transport) Lanes(target ext.InstanceID) int {
	if p := t.peer(target); p != nil {
		return len(p.lanes)
	}
	return 0
}

// MaxMessageSize is the largest header plus payload sent or accepted
// (WithMaxFrameSize, 16 MiB by default).
func (t *Transport) MaxMessageSize() int { return t.o.maxFrameSize }

// CheckHealth connects a probe DEALER to the peer's endpoint and reports
// it healthy once the ZMTP handshake completes, as the reference waits for
// its probe's CONNECTED event. A failure, or no answer until ctx ends (5 s
// when ctx has no deadline), matches ext.ErrPeerUnreachable.
func (t *Transport) CheckHealth(ctx context.Context, target ext.InstanceID) error {
	p := t.peer(target)
	if p == nil {
		return ext.ErrPeerNotRegistered
	}
	if t.closing.Load() {
		return ext.ErrTransportClosed
	}
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, healthTimeout)
		defer cancel()
	}
	probe := zmq4.NewDealer(ctx, zmq4.WithLogger(quiet), zmq4.WithDialerMaxRetries(0))
	defer probe.Close()
	done := make(chan error, 1)
	go func() { done <- probe.Dial(guardedEndpoint(p.endpoint, t.o.maxFrameSize)) }()
	var err error
	select {
	case err = <-done:
	case <-ctx.Done():
		err = ctx.Err()
	}
	if err != nil {
		return fmt.Errorf("zmq: health of %v: %w: %w", target, ext.ErrPeerUnreachable, err)
	}
	return nil
}

// Shutdown stops receiving (the listener and every inbound connection
// close), sends what was admitted
// within the teardown grace, then closes every DEALER socket, which ends
// a send blocked on a peer that does not read, and reports what is left
// failed. It returns when done; Closed is closed then.
func (t *Transport) Shutdown() {
	t.shutOnce.Do(t.shutdown)
	<-t.closed
}

func (t *Transport) shutdown() {
	defer close(t.closed)
	end := time.Now().Add(t.o.teardownGrace)
	t.grace.Store(end.UnixNano())
	t.mu.Lock()
	t.closing.Store(true)
	started := t.started
	t.mu.Unlock()
	if !started {
		t.cancel()
		return
	}
	t.router.close()
	close(t.stop)
	timer := time.AfterFunc(time.Until(end), t.abortAll)
	t.writers.Wait()
	timer.Stop()
	t.cancel()
}

// abortAll ends the teardown grace: every lane's socket closes, so a send
// still under way returns and its frame is reported failed.
func (t *Transport) abortAll() {
	t.cancel()
	t.mu.RLock()
	defer t.mu.RUnlock()
	for _, p := range t.peers {
		for _, l := range p.lanes {
			l.abort()
		}
	}
}

// Closed is closed once Shutdown finished.
func (t *Transport) Closed() <-chan struct{} { return t.closed }

// pastGrace reports whether a teardown grace has ended.
func (t *Transport) pastGrace() bool {
	g := t.grace.Load()
	return g != 0 && time.Now().UnixNano() > g
}

// failed reports a frame admitted but not sent and lets its owner go.
func (t *Transport) failed(target ext.InstanceID, f ext.Frame, err error) {
	t.sendFailed.Add(1)
	t.observe().Rejection(ext.RejectSendFailed)
	t.adapter.ReportSendError(target, f, err)
	f.Release()
}
