package ucx

import (
	"context"
	"crypto/rand"
	"encoding/binary"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/velo-go/velo/ext"
	"github.com/velo-go/velo/internal/msgpeers"
)

// ErrNotBuilt is returned by New in a binary built without the ucx build
// tag (go build -tags ucx), which is the one that links libucp.
var ErrNotBuilt = errors.New("ucx: this binary was built without -tags ucx (the UCX transport needs cgo and libucx-dev)")

// healthTimeout bounds a health check whose context has no deadline.
const healthTimeout = 5 * time.Second

// Transport is the UCX messenger transport: every frame is one eager
// Active Message on the peer's endpoint. See the package documentation.
type Transport struct {
	o           options
	w           amWorker
	incarnation uint64
	local       endpoint // our address entry
	maxHeader   int      // the largest AM header UCX takes; 0 when unknown
	reapOn      bool
	epoch       time.Time

	helloHeader, helloBody []byte

	// core is the peer table of lanes, their gates and writers, and the
	// teardown grace, shared with transport/nats and transport/zmq; the
	// endpoints and the AM traffic are this package's.
	core msgpeers.Core

	mu        sync.RWMutex
	peers     map[ext.InstanceID]*peer
	byInc     map[uint64]*peer
	byWorker  map[ext.WorkerID]*peer
	strangers map[uint64]*link // said hello, not registered: for replies only

	epMu    sync.Mutex
	eps     map[endpointID]*epRef
	orphans map[endpointID]error // failed before adopt saw them

	in      inbox
	replies chan reply
	wireups chan *link
	pingMu  sync.Mutex
	pings   map[uint64]chan struct{}
	pingSeq atomic.Uint64

	posted    atomic.Int64  // frames posted and not done, for the teardown
	drained   chan struct{} // signalled when posted reaches zero while drainWait
	drainWait atomic.Bool   // Shutdown waits for posted to reach zero

	started   atomic.Bool
	closing   atomic.Bool // endpoint errors from here on are our own doing
	stop      chan struct{}
	bg        sync.WaitGroup
	closeW    sync.Once
	shutOnce  sync.Once
	closed    chan struct{}
	deliverer chan struct{} // closed when the delivery goroutine ends

	stats counters
}

// peer is a registered peer: its address entry (as registered, to tell a
// registration again from a new one), its limit and its link.
type peer struct {
	id    ext.InstanceID
	entry string
	max   int // min(our eager max, the peer's)
	link  *link
}

// counters are what Stats reports.
type counters struct {
	malformed, tooLarge, echoDropped, replyDropped, reaped, inboxWaits, dropped atomic.Uint64
}

// Stats counts what the transport refused, dropped or closed.
type Stats struct {
	// Malformed inbound AMs (a header without the incarnation, a bad
	// ping, pong or hello) and TooLarge ones (over our eager max) are
	// dropped; the endpoint goes on.
	Malformed, TooLarge uint64
	// DrainRefused requests were refused because the node drains; each is
	// echoed ShuttingDown, unless the sender never said hello (EchoDropped).
	DrainRefused, EchoDropped uint64
	// ReplyDropped counts pongs and echoes dropped because the reply
	// queue was full; the sender's deadline ends its wait.
	ReplyDropped uint64
	// SendFailed frames were admitted and not sent; RouteFailed inbound
	// frames found the node stopped.
	SendFailed, RouteFailed uint64
	// Reaped endpoints were closed by the idle reaper.
	Reaped uint64
	// InboxWaits counts the times the progress goroutine waited for the
	// node to take inbound frames (a receiver pushing back on its
	// senders); Dropped counts inbound frames that arrived during our own
	// shutdown, after the inbox closed.
	InboxWaits, Dropped uint64
}

// newTransport wraps a worker; New makes the worker.
func newTransport(o options, w amWorker) (*Transport, error) {
	t := &Transport{
		o:         o,
		w:         w,
		reapOn:    o.idleTimeout > 0,
		epoch:     time.Now(),
		peers:     map[ext.InstanceID]*peer{},
		byInc:     map[uint64]*peer{},
		byWorker:  map[ext.WorkerID]*peer{},
		strangers: map[uint64]*link{},
		eps:       map[endpointID]*epRef{},
		orphans:   map[endpointID]error{},
		replies:   make(chan reply, replyQueue),
		wireups:   make(chan *link, wireupQueue),
		pings:     map[uint64]chan struct{}{},
		drained:   make(chan struct{}, 1),
		stop:      make(chan struct{}),
		closed:    make(chan struct{}),
		deliverer: make(chan struct{}),
	}
	t.incarnation = randomIncarnation()
	addr := w.Address()
	if len(addr) == 0 {
		return nil, errors.New("ucx: the worker has no address")
	}
	t.local = endpoint{v: BlobVersion, amIDBase: AMIDBase, eagerMax: uint32(o.eagerMax),
		incarnation: t.incarnation, workerAddr: addr}
	t.helloHeader = binary.LittleEndian.AppendUint64(nil, t.incarnation)
	t.helloBody = t.local.encode()
	if hl, ok := w.(amHeaderLimiter); ok {
		t.maxHeader = hl.MaxAMHeader()
	}
	t.in.init(o.inboxBytes, &t.stats)
	t.core.Init(o.channelBytes)
	return t, nil
}

func randomIncarnation() uint64 {
	var b [8]byte
	for {
		if _, err := rand.Read(b[:]); err != nil {
			panic("ucx: crypto/rand failed: " + err.Error())
		}
		if v := binary.LittleEndian.Uint64(b[:]); v != 0 {
			return v
		}
	}
}

// Key is "ucx".
func (t *Transport) Key() ext.TransportKey { return Key }

// Priority orders transports when several reach a peer (default 80).
func (t *Transport) Priority() int { return t.o.priority }

// RetainsOwners is true: a frame keeps its Owner until UCX completed its send.
func (t *Transport) RetainsOwners() bool { return true }

// Incarnation is this transport's random per-start value, the first 8
// bytes of every frame header it sends.
func (t *Transport) Incarnation() uint64 { return t.incarnation }

// SetObservability installs the metrics handle.
func (t *Transport) SetObservability(o ext.Observability) { t.core.SetObservability(o) }

// Stats returns the transport's counters.
func (t *Transport) Stats() Stats {
	s := &t.stats
	return Stats{
		Malformed: s.malformed.Load(), TooLarge: s.tooLarge.Load(),
		DrainRefused: t.core.DrainRefused(), EchoDropped: s.echoDropped.Load(),
		ReplyDropped: s.replyDropped.Load(),
		SendFailed:   t.core.SendFailed(), RouteFailed: t.core.RouteFailed(),
		Reaped: s.reaped.Load(), InboxWaits: s.inboxWaits.Load(), Dropped: s.dropped.Load(),
	}
}

// Start installs the AM handlers and returns the address entry: the
// packed worker address with the wire version, the AM id base, the eager
// max and the incarnation. There is no listener: a peer creates its
// endpoint to us from that entry.
func (t *Transport) Start(ctx context.Context, adapter *ext.TransportAdapter) ([]byte, error) {
	if !t.started.CompareAndSwap(false, true) {
		return nil, errors.New("ucx: transport already started")
	}
	if t.core.Closing() {
		return nil, ext.ErrTransportClosed
	}
	t.core.SetAdapter(adapter)
	t.w.OnEndpointError(t.onEndpointError)
	for k := range numKinds {
		t.w.SetAMHandler(AMIDBase+uint16(k), t.amHandler(k))
	}
	go t.deliverLoop()
	t.goBG(t.replyLoop)
	t.goBG(t.wireupLoop)
	if t.reapOn {
		t.goBG(t.reapLoop)
	}
	t.core.MarkStarted()
	return t.local.encode(), nil
}

func (t *Transport) goBG(f func()) {
	t.bg.Add(1)
	go func() {
		defer t.bg.Done()
		f()
	}()
}

// Register learns a peer from its "ucx" address entry. An entry of
// another wire version is refused with an error that matches
// ErrVersionMismatch and names both versions. Nothing is connected unless
// WithEagerEndpoints is on; then the endpoint is created in the
// background.
func (t *Transport) Register(info ext.PeerInfo) error {
	entry, err := info.Address.Lookup(Key)
	if err != nil {
		return err
	}
	e, err := decodeEndpoint(entry)
	if err != nil {
		return fmt.Errorf("ucx: peer %v: %w", info.InstanceID, err)
	}
	id := info.InstanceID
	t.mu.RLock()
	old := t.peers[id]
	t.mu.RUnlock()
	if old != nil && old.entry == string(entry) {
		return nil
	}
	p := &peer{id: id, entry: string(entry), max: min(t.o.eagerMax, int(e.eagerMax)), link: newLink(t, e, id)}
	err = t.core.Register(id, p.entry, t.o.lanes, func(l *msgpeers.Lane) msgpeers.Writer {
		return newWriter(t, l, p.link)
	})
	if err != nil {
		return err
	}
	t.mu.Lock()
	if cur := t.peers[id]; cur != nil {
		old = cur
		delete(t.byInc, cur.link.remote.incarnation)
	}
	t.peers[id], t.byInc[e.incarnation], t.byWorker[id.WorkerID()] = p, p, p
	stranger := t.strangers[e.incarnation]
	delete(t.strangers, e.incarnation)
	t.mu.Unlock()
	if old != nil {
		old.link.close()
	}
	if stranger != nil {
		stranger.close()
	}
	if t.o.eagerEPs {
		select {
		case t.wireups <- p.link:
		default: // a dropped hint: the endpoint is created at first use
		}
	}
	return nil
}

// Unregister forgets a peer: what is queued for it fails, its endpoint
// closes.
func (t *Transport) Unregister(id ext.InstanceID) {
	t.core.Unregister(id)
	t.mu.Lock()
	p := t.peers[id]
	if p != nil {
		delete(t.peers, id)
		delete(t.byInc, p.link.remote.incarnation)
		delete(t.byWorker, id.WorkerID())
	}
	t.mu.Unlock()
	if p != nil {
		p.link.close()
	}
}

func (t *Transport) peer(id ext.InstanceID) *peer {
	t.mu.RLock()
	defer t.mu.RUnlock()
	return t.peers[id]
}

// linkFor is the link to the sender of incarnation inc: a registered
// peer's or a stranger's, nil when it never said hello.
func (t *Transport) linkFor(inc uint64) *link {
	t.mu.RLock()
	defer t.mu.RUnlock()
	if p := t.byInc[inc]; p != nil {
		return p.link
	}
	return t.strangers[inc]
}

// Send sends on lane 0.
func (t *Transport) Send(target ext.InstanceID, f ext.Frame) (ext.SendOutcome, error) {
	return t.SendOnLane(target, 0, f)
}

// SendOnLane queues f for target. A frame larger than the limit to that
// peer (the smaller of both eager maxes) is refused here with an
// ext.FrameTooLargeError, and so is a header larger than UCX's AM header
// limit, before anything reaches the wire.
func (t *Transport) SendOnLane(target ext.InstanceID, lane int, f ext.Frame) (ext.SendOutcome, error) {
	max := t.o.eagerMax
	if p := t.peer(target); p != nil {
		max = p.max
	}
	if t.maxHeader > 0 && incLen+len(f.Header) > t.maxHeader {
		t.core.Observe().Rejection(ext.RejectTooLarge)
		return ext.AdmittedOutcome, fmt.Errorf("ucx: a header of %d bytes exceeds UCX's AM header limit of %d: %w",
			len(f.Header), t.maxHeader-incLen, ext.ErrFrameTooLarge)
	}
	return t.core.SendOnLane(target, lane, f, max)
}

// Lanes is the number of lanes kept to a registered peer, 0 for another.
func (t *Transport) Lanes(target ext.InstanceID) int { return t.core.Lanes(target) }

// LaneStats reports each lane to target (ext.LaneStatser).
func (t *Transport) LaneStats(target ext.InstanceID) []ext.LaneStats {
	return t.core.LaneStats(target)
}

// MaxMessageSize is the largest header plus payload sent: WithEagerMax
// (1 MiB by default). A peer that advertises less gets less.
func (t *Transport) MaxMessageSize() int { return t.o.eagerMax }

// Closed is closed once Shutdown finished.
func (t *Transport) Closed() <-chan struct{} { return t.closed }

// now is the reaper's clock: nanoseconds since the transport was made.
func (t *Transport) now() int64 { return int64(time.Since(t.epoch)) }

// stamp records a use of l, when the reaper runs.
func (t *Transport) stamp(l *link) {
	if t.reapOn {
		l.touch(t.now())
	}
}

// adopt records r so that a failure of its endpoint finds it. It returns
// the error of a failure that arrived before it did.
func (t *Transport) adopt(r *epRef) error {
	t.epMu.Lock()
	defer t.epMu.Unlock()
	if err, ok := t.orphans[r.id]; ok {
		delete(t.orphans, r.id)
		return err
	}
	t.eps[r.id] = r
	return nil
}

// maxOrphans bounds the failures kept for endpoints not adopted yet.
const maxOrphans = 1024

// onEndpointError runs (off the progress goroutine) when UCX failed an
// endpoint: the peer died, or its connection broke. The endpoint is
// closed, the next use creates another, and a registered peer is
// reported lost, once per endpoint, unless we are shutting down.
func (t *Transport) onEndpointError(id endpointID, err error) {
	t.epMu.Lock()
	r := t.eps[id]
	delete(t.eps, id)
	if r == nil {
		if len(t.orphans) >= maxOrphans {
			clear(t.orphans)
		}
		t.orphans[id] = err
		t.epMu.Unlock()
		return
	}
	t.epMu.Unlock()
	if !r.detach() {
		return // we closed it already
	}
	r.failErr = err
	close(r.failed)
	t.w.CloseEndpoint(id)
	l := r.l
	if l.peer.IsZero() || t.closing.Load() || l.isClosed() {
		return
	}
	t.core.Adapter().ReportPeerLost(l.peer, fmt.Errorf("ucx: endpoint to %v failed: %w: %w", l.peer, ext.ErrPeerUnreachable, err))
}

// dialFailed reports a registered peer lost when its endpoint could not
// be created, as a failed dial is for a socket transport.
func (t *Transport) dialFailed(l *link, err error) {
	if l.peer.IsZero() || t.closing.Load() || l.isClosed() {
		return
	}
	t.core.Adapter().ReportPeerLost(l.peer, err)
}

// dropEP closes an endpoint we no longer want (unregistered, replaced,
// reaped); UCX flushes what was posted on it first.
func (t *Transport) dropEP(r *epRef) {
	if !r.detach() {
		return
	}
	t.epMu.Lock()
	delete(t.eps, r.id)
	t.epMu.Unlock()
	t.w.CloseEndpoint(r.id)
}
