// Package tcppath is the per-stream TCP path of package streaming: the
// listener that takes one connection per stream, the reader that feeds
// each connection's frames into its anchor's inlet, the producer's end of
// such a connection (its queue, egress pump and watcher), the heartbeats
// and the reader's watchdog, and the control messages that stop, cancel
// and end the streams of this path.
//
// It imports neither streaming nor messenger. Package streaming owns the
// node (its Manager, messenger, ids and mux), decides per attach whether
// a stream takes this path or the mux, and registers the handlers this
// package describes (Handlers); what the path needs from the node reaches
// it through Host.
package tcppath

import (
	"log/slog"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"github.com/velo-go/velo/ext"
	wire "github.com/velo-go/velo/internal/streamwire"
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
	// Listener takes the per-stream connections; nil when the node serves
	// streams over the mux only (then nothing binds on this path).
	Listener net.Listener
	// Net dials the owners' listeners.
	Net Net
	// Key is the path's transport key, which attach answers carry:
	// wire.TCPStreamKey, or wire.TLSStreamKey when Net is TLS.
	Key string
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
// bound and waiting for their connection, the live connections of both
// ends, and this node's producer streams by stream id.
type Node struct {
	host         Host
	owner        ext.WorkerID
	ln           net.Listener
	network      Net
	key          string // wire.TCPStreamKey or wire.TLSStreamKey
	acceptWindow time.Duration
	heartbeat    time.Duration
	log          *slog.Logger
	met          *metrics.StreamingMetrics
	nextID       func() uint64
	hb           *heartbeater  // beats this node's producer streams
	firings      atomic.Uint64 // streams ended by the watchdog

	mu      sync.Mutex
	closed  bool
	pending map[wire.TCPPreamble]*pendingBind
	conns   map[net.Conn]struct{} // every per-stream connection, both ends
	wg      sync.WaitGroup        // accept loop, readers, pumps, watchers, heartbeater

	// This node's producer streams by stream id (registry.go).
	streamsMu sync.Mutex
	streams   map[uint64]*Stream

	strangerSignals  atomic.Uint64 // stops, cancels and MPSC detaches ignored: not from the worker they concern
	strangerControls atomic.Uint64 // detaches, finalizes and cancels ignored: not from the bound producer
}

// New makes the path of one node. Start starts its goroutines.
func New(cfg Config) *Node {
	if cfg.Key == "" {
		cfg.Key = wire.TCPStreamKey
	}
	return &Node{
		host: cfg.Host, owner: cfg.Owner, ln: cfg.Listener, network: cfg.Net, key: cfg.Key,
		acceptWindow: cfg.AcceptWindow, heartbeat: cfg.Heartbeat, log: cfg.Log,
		met: cfg.Metrics, nextID: cfg.NextID, hb: newHeartbeater(),
		pending: make(map[wire.TCPPreamble]*pendingBind),
		conns:   make(map[net.Conn]struct{}),
		streams: make(map[uint64]*Stream),
	}
}

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

// Close stops the path: it closes the listener and every per-stream
// connection (remote producers see their stream cancelled, remote
// consumers see ErrSenderDropped) and waits for the path's goroutines.
// It may be called more than once.
func (n *Node) Close() {
	n.mu.Lock()
	first := !n.closed
	n.closed = true
	for k, pb := range n.pending {
		pb.timer.Stop()
		delete(n.pending, k)
	}
	for c := range n.conns {
		c.Close()
	}
	n.mu.Unlock()
	if first {
		close(n.hb.stop)
	}
	if n.ln != nil {
		n.ln.Close()
	}
	n.wg.Wait()
}

// track adds a per-stream connection to the set that Close closes, and
// counts the goroutines that will serve it. It is false once the node is
// shut down.
func (n *Node) track(c net.Conn, goroutines int) bool {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.closed {
		return false
	}
	n.conns[c] = struct{}{}
	n.wg.Add(goroutines)
	return true
}

func (n *Node) untrack(c net.Conn) {
	c.Close()
	n.mu.Lock()
	delete(n.conns, c)
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
