// Package framepath is the per-stream path of package streaming, over any
// frame transport (ext.FrameTransport: TCP, TLS, gRPC or one from outside
// this module): the listener's streams bound by attaches and waiting in
// their accept window, the reader that feeds each inbound stream's frames
// into its anchor's inlet under the heartbeat watchdog, the producer's end
// of a stream (its queue and egress pump, which hands the transport what
// queued as one batch and sees the consumer close the stream), the
// heartbeats, MPSC producers, and the control messages that stop, cancel
// and end the streams of this path. It is written once against the
// interface; the transports know nothing of anchors.
//
// It imports neither streaming nor messenger. Package streaming owns the
// node (its Manager, messenger, ids and mux), decides per attach whether
// a stream takes this path or the mux, and registers the handlers this
// package describes (Handlers); what the path needs from the node reaches
// it through Host.
package framepath

import (
	"log/slog"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"github.com/velo-go/velo/ext"
	"github.com/velo-go/velo/metrics"
	"github.com/velo-go/velo/streaming/internal/inlet"
)

// Host is what the path needs from its node. Package streaming implements
// it over its Manager and messenger; none of it is called per frame.
type Host interface {
	// Anchor is the local anchor with that local id, or nil.
	Anchor(localID uint64) *inlet.State
	// Post sends body to handler on worker w, fire-and-forget. It returns
	// nil when w is not known: its node is gone, so nobody is listening.
	Post(w ext.WorkerID, handler string, body []byte) error
	// Stopped is closed once the node's messenger stops.
	Stopped() <-chan struct{}
}

// Config is what New needs to make the path of one node.
type Config struct {
	Host Host
	// Owner is the node's WorkerID: control messages for anchors of
	// other workers are no-ops.
	Owner ext.WorkerID
	// Listener takes the inbound streams; nil when the node serves
	// streams over the mux only (then nothing binds on this path).
	Listener ext.FrameListener
	// Transport dials the owners' listeners. Its key is the path's,
	// which attach answers carry.
	Transport ext.FrameTransport
	// AcceptWindow is how long a bound stream waits for its connection.
	AcceptWindow time.Duration
	// Heartbeat is the interval this node answers attaches with and
	// watches its readers by.
	Heartbeat time.Duration
	Log       *slog.Logger
	Metrics   *metrics.StreamingMetrics // nil: nothing recorded
	// NextID draws a routing session: random, since a peer presents it
	// back as authority.
	NextID func() uint64
}

// Node is the per-stream path of one node: its listener, the streams
// bound and waiting for their connection, the live streams of both ends,
// and this node's producer streams by stream id.
type Node struct {
	host         Host
	owner        ext.WorkerID
	ln           ext.FrameListener
	ft           ext.FrameTransport
	key          string               // ft's key
	scheme       metrics.StreamScheme // key's transport_scheme label
	maxFrame     int                  // ft's largest frame
	acceptWindow time.Duration
	heartbeat    time.Duration
	log          *slog.Logger
	met          *metrics.StreamingMetrics
	nextID       func() uint64
	hb           *heartbeater  // beats this node's producer streams
	firings      atomic.Uint64 // streams ended by the watchdog

	mu      sync.Mutex
	closed  bool
	pending map[ext.StreamRoute]*pendingBind
	ins     map[ext.FrameInbound]struct{} // the inbound streams being read
	outs    map[ext.FrameSender]struct{}  // this node's producer streams
	wg      sync.WaitGroup                // accept loop, readers, pumps, heartbeater

	// This node's producer streams by stream id (registry.go).
	streamsMu sync.Mutex
	streams   map[uint64]*Stream

	strangerSignals  atomic.Uint64 // stops, cancels and MPSC detaches ignored: not from the worker they concern
	strangerControls atomic.Uint64 // detaches, finalizes and cancels ignored: not from the bound producer
}

// New makes the path of one node. Start starts its goroutines.
func New(cfg Config) *Node {
	return &Node{
		host: cfg.Host, owner: cfg.Owner, ln: cfg.Listener, ft: cfg.Transport,
		key: string(cfg.Transport.Key()), maxFrame: cfg.Transport.MaxFrameSize(),
		scheme:       cfg.Metrics.FrameScheme(string(cfg.Transport.Key())),
		acceptWindow: cfg.AcceptWindow, heartbeat: cfg.Heartbeat, log: cfg.Log,
		met: cfg.Metrics, nextID: cfg.NextID, hb: newHeartbeater(),
		pending: make(map[ext.StreamRoute]*pendingBind),
		ins:     make(map[ext.FrameInbound]struct{}),
		outs:    make(map[ext.FrameSender]struct{}),
		streams: make(map[uint64]*Stream),
	}
}

// Key is the path's transport key.
func (n *Node) Key() string { return n.key }

// Scheme is the transport_scheme label of the path's operations: its
// transport's key.
func (n *Node) Scheme() metrics.StreamScheme { return n.scheme }

// MaxFrame is the largest frame the path's transport carries.
func (n *Node) MaxFrame() int { return n.maxFrame }

// Start starts the heartbeater, one for all the streams this node
// produces, and the accept loop when there is a listener.
func (n *Node) Start() {
	n.wg.Add(1)
	go n.hb.run(n.wg.Done)
	if n.ln != nil {
		n.wg.Add(1)
		go n.acceptLoop()
	}
}

// Listening reports whether the node has a per-stream listener: without
// one, only the mux can carry its streams.
func (n *Node) Listening() bool { return n.ln != nil }

// Addr is the listener's address, or nil without one.
func (n *Node) Addr() net.Addr {
	if n.ln == nil {
		return nil
	}
	return n.ln.Addr()
}

// Close stops the path: it closes the listener and every stream of both
// ends (remote producers see their stream cancelled, remote consumers see
// ErrSenderDropped) and waits for the path's goroutines. It may be called
// more than once.
func (n *Node) Close() {
	n.mu.Lock()
	first := !n.closed
	n.closed = true
	for k, pb := range n.pending {
		pb.timer.Stop()
		delete(n.pending, k)
	}
	var ins []ext.FrameInbound
	var outs []ext.FrameSender
	for in := range n.ins {
		ins = append(ins, in)
	}
	for out := range n.outs {
		outs = append(outs, out)
	}
	n.mu.Unlock()
	if first {
		close(n.hb.stop)
	}
	if n.ln != nil {
		n.ln.Close()
	}
	for _, in := range ins {
		in.Close()
	}
	for _, out := range outs {
		out.Close() // it waits for the transport's goroutines of the stream
	}
	n.wg.Wait()
}

// trackIn adds an inbound stream to the set that Close closes, and counts
// its reader. It is false once the node is shut down.
func (n *Node) trackIn(in ext.FrameInbound) bool {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.closed {
		return false
	}
	n.ins[in] = struct{}{}
	n.wg.Add(1)
	return true
}

func (n *Node) untrackIn(in ext.FrameInbound) {
	in.Close()
	n.mu.Lock()
	delete(n.ins, in)
	n.mu.Unlock()
}

// trackOut adds a producer stream to the set that Close closes, and
// counts its pump. It is false once the node is shut down.
func (n *Node) trackOut(out ext.FrameSender) bool {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.closed {
		return false
	}
	n.outs[out] = struct{}{}
	n.wg.Add(1)
	return true
}

func (n *Node) untrackOut(out ext.FrameSender) {
	out.Close()
	n.mu.Lock()
	delete(n.outs, out)
	n.mu.Unlock()
}

// opStart reads the clock for an operation's duration, only when metrics
// are installed.
func (n *Node) opStart() time.Time {
	if n.met == nil {
		return time.Time{}
	}
	return time.Now()
}
