package framepath

import (
	"fmt"
	"io"
	"time"

	"github.com/velo-go/velo/ext"
	"github.com/velo-go/velo/internal/muxwire"
	wire "github.com/velo-go/velo/internal/streamwire"
	"github.com/velo-go/velo/streaming/internal/inlet"
)

// The owner's side of an attach on this path (control.rs of the
// reference): _anchor_attach binds the stream to a routing session of the
// owner's and answers the path's transport key ("tcp-stream", ...) with
// it; the producer then opens a stream on the owner's listener, and the
// route it names (anchor local id, routing session) claims the bind
// (accept.go).

// RefusedPrefix starts every refusal that RefuseAttach writes: the
// attach's counter tells a refusal from a bind by it.
var RefusedPrefix = []byte(`{"Err":`)

// RefuseAttach is the answer of an _anchor_attach that bound nothing. The
// refusal is an answer, not a failed call: the producer turns its reason
// into the error the same-worker attach gives.
func RefuseAttach(format string, args ...any) ([]byte, error) {
	resp := wire.AttachResponse{Refused: true, Reason: fmt.Sprintf(format, args...)}
	return resp.AppendJSON(nil), nil
}

// pendingBind is a stream that an attach bound and whose connection has
// not arrived.
type pendingBind struct {
	st    *inlet.State
	bind  *bind
	timer *time.Timer
	mpsc  *inlet.Remote // set for a producer of an MPSC anchor (mpsc.go)
}

// bind is a stream that _anchor_attach bound on this node: the producer
// to signal, and the proxy sender that feeds the inlet for it. The inlet
// keeps it as its inlet.Bind; no bind means no remote producer to signal.
type bind struct {
	n        *Node
	key      ext.StreamRoute // the bind's entry in Node.pending
	producer ext.WorkerID
	streamID uint64 // the producer's id for the stream (CancelHandle)
	proxy    *inlet.Sender
	conn     io.Closer // the inbound stream, set by the inlet once it came (ConnectBind); guarded by the anchor's lock
}

// The inlet.Bind of the per-stream path.
func (b *bind) Producer() ext.WorkerID { return b.producer }
func (b *bind) Proxy() *inlet.Sender   { return b.proxy }
func (b *bind) Conn() io.Closer        { return b.conn }
func (b *bind) SetConn(c io.Closer)    { b.conn = c }
func (b *bind) Signal(handler string)  { b.signal(handler) }
func (b *bind) Unpend()                { b.n.unpend(b) }

// signal tells the producer of the stream to stop or cancel. It never
// waits: a stalled peer must not hold up the consumer. A lost message is
// covered for a cancel by the closing of the connection.
func (b *bind) signal(handler string) {
	body := (&wire.StreamCancelRequest{SenderStreamID: b.streamID}).AppendJSON(nil)
	if err := b.n.host.Post(b.producer, handler, body); err != nil {
		b.n.log.Debug("velo: stream control message not sent", "handler", handler, "err", err)
	}
}

// Bind is the part of _anchor_attach that this path serves, once the node
// has found the anchor st that handle names and chosen this path over the
// mux: it binds the stream of producer (the worker the request came from,
// not the one its body names) and streamID (the producer's id in the
// request's cancel handle) to a fresh routing session, and returns the
// answer, a refusal included.
func (n *Node) Bind(st *inlet.State, handle wire.AnchorHandle, producer ext.WorkerID, streamID uint64) ([]byte, error) {
	if n.ln == nil {
		return RefuseAttach("this node serves streams only over %s", muxwire.TransportKey)
	}
	if st.ReleasePrebind() {
		// The pre-bound key is the mux, which this producer does not
		// offer: the pre-bind goes back and the attach is refused.
		return RefuseAttach("anchor %v is pre-bound for %s, which this producer does not offer", handle, muxwire.TransportKey)
	}
	// A routing session of our own, not the producer's session id: two
	// producers on different workers may use the same one (control.rs).
	key := ext.StreamRoute{AnchorID: handle.LocalID(), SessionID: n.nextID()}
	b := &bind{n: n, key: key, producer: producer, streamID: streamID, proxy: inlet.NewSender(st, true)}
	// A stop or cancel made before this attach is sent now; the producer
	// registered its sender before it asked, so the message cannot come
	// too early.
	stop, cancel, why := st.ClaimRemote(b)
	switch why {
	case inlet.ClaimEnded:
		return RefuseAttach("anchor %v not found", handle)
	case inlet.ClaimTaken:
		return RefuseAttach("anchor %v already attached", handle)
	}
	pb := &pendingBind{st: st, bind: b}

	n.mu.Lock()
	if n.closed {
		n.mu.Unlock()
		st.UnclaimRemote(b)
		return RefuseAttach("node is shutting down")
	}
	n.pending[key] = pb
	// One timer per bound stream, stopped when its connection arrives.
	pb.timer = time.AfterFunc(n.acceptWindow, func() { n.expire(key, pb) })
	n.mu.Unlock()
	switch {
	case cancel:
		b.signal(wire.StreamCancelHandler)
	case stop:
		b.signal(wire.StreamStopHandler)
	}

	resp := wire.AttachResponse{
		TransportKey:        n.key,
		HeartbeatIntervalMS: uint64(n.heartbeat / time.Millisecond),
		RoutingSessionID:    key.SessionID,
	}
	return resp.AppendJSON(nil), nil
}

// takePending removes pb, pending under key, and reports whether it was
// still there: an expiry that finds it gone does nothing, since whatever
// took it ended or claimed the bind.
func (n *Node) takePending(key ext.StreamRoute, pb *pendingBind) bool {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.pending[key] != pb {
		return false
	}
	delete(n.pending, key)
	return true
}

// expire ends a bound stream whose connection did not arrive in the
// accept window: the anchor sees ErrSenderDropped, as in the reference.
func (n *Node) expire(key ext.StreamRoute, pb *pendingBind) {
	if !n.takePending(key, pb) {
		return
	}
	n.log.Warn("velo: stream bound but its producer never connected", "anchor", key.AnchorID, "session", key.SessionID)
	pb.st.DropBind(pb.bind)
}

// unpend forgets the pending entry of b, if its connection never came.
func (n *Node) unpend(b *bind) {
	n.mu.Lock()
	pb := n.pending[b.key]
	if pb != nil && pb.bind == b {
		delete(n.pending, b.key)
		pb.timer.Stop()
	}
	n.mu.Unlock()
}

// take claims the pending entry of the inbound stream whose route is key,
// or nil when no stream is bound to it.
func (n *Node) take(key ext.StreamRoute) *pendingBind {
	n.mu.Lock()
	pb := n.pending[key]
	delete(n.pending, key)
	n.mu.Unlock()
	if pb != nil {
		pb.timer.Stop()
	}
	return pb
}
