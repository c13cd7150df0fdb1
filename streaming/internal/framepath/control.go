package framepath

import (
	"time"

	"github.com/velo-go/velo/ext"
	wire "github.com/velo-go/velo/internal/streamwire"
	"github.com/velo-go/velo/metrics"
	"github.com/velo-go/velo/streaming/internal/inlet"
	"github.com/velo-go/velo/streaming/internal/streamerr"
)

// Control messages between the two ends of a stream on this path
// (control.rs of the reference).
//
// The producer's node keeps its streams in a registry keyed by the stream
// id of the CancelHandle it sent in _anchor_attach (registry.go). The
// consumer's node sends _stream_stop and _stream_cancel to that id,
// fire-and-forget. The owner of an anchor serves _anchor_detach,
// _anchor_finalize and _anchor_cancel, as the reference registers them,
// for a producer that ends its stream by message instead of by a terminal
// frame. Neither a Go producer nor the reference's 0.9 producer sends
// them: a terminal frame on the stream says the same.

// UnitAnswer is the answer of a handler that returns nothing: serde_json
// writes Rust's () as null, and a Rust caller decodes it.
var UnitAnswer = []byte("null")

// Handler describes one messenger handler of the path; package streaming
// registers it, since this package does not see the messenger. Exactly
// one of Unary and Fire is set. From is the worker the messenger stamped
// the request with; payload is valid only during the call.
type Handler struct {
	Name        string
	Unary       func(from ext.WorkerID, payload []byte) ([]byte, error)
	Fire        func(from ext.WorkerID, payload []byte)
	DrainExempt bool // it serves streams that were already accepted
}

// Handlers are the control handlers of the path, of both ends: the
// producer's stop and cancel, the owner's detach, finalize and cancel of
// a stream, and the owner's MPSC detach and cancel.
func (n *Node) Handlers() []Handler {
	return []Handler{
		{Name: wire.StreamCancelHandler, Fire: n.onStreamCancel, DrainExempt: true},
		{Name: wire.StreamStopHandler, Fire: n.onStreamStop, DrainExempt: true},
		{Name: wire.AnchorDetachHandler, Unary: n.onAnchorDetach, DrainExempt: true},
		{Name: wire.AnchorFinalizeHandler, Unary: n.onAnchorFinalize, DrainExempt: true},
		{Name: wire.AnchorCancelHandler, Unary: n.onAnchorCancel, DrainExempt: true},
		{Name: wire.MPSCAnchorDetachHandler, Unary: n.onMPSCDetach},
		{Name: wire.MPSCAnchorCancelHandler, Unary: n.onMPSCCancel},
	}
}

// onStreamCancel: the consumer cancelled. Idempotent; an unknown id is a
// stream that already ended.
func (n *Node) onStreamCancel(from ext.WorkerID, payload []byte) {
	if s := n.signalled(from, payload); s != nil {
		n.Unregister(s)
		s.fail(streamerr.ErrCancelled)
	}
}

// onStreamStop: the consumer asks for a graceful end. The stream stays
// registered: a cancel may still follow.
func (n *Node) onStreamStop(from ext.WorkerID, payload []byte) {
	if s := n.signalled(from, payload); s != nil {
		s.stop()
	}
}

// target finds the SPSC anchor a handle request names, or nil: an unknown,
// ended or MPSC anchor makes these handlers successful no-ops.
func (n *Node) target(payload []byte) (*inlet.State, error) {
	req, err := wire.DecodeHandleRequest(payload)
	if err != nil {
		return nil, err
	}
	if req.Handle.Owner() != n.owner || req.Handle.IsMPSC() {
		return nil, nil
	}
	return n.host.Anchor(req.Handle.LocalID()), nil
}

// takeBind detaches the remote bind from st and forgets its pending entry.
// It returns nil when no remote producer was bound. A request from another
// worker than the bound producer takes nothing (ok false): the handle is a
// capability the consumer hands out, but a stream with a producer belongs
// to that producer, and the messenger has bound the asker to its
// connection.
func (n *Node) takeBind(st *inlet.State, asker ext.WorkerID) (b *bind, ok bool) {
	ib, ok := st.TakeBindFrom(asker)
	if !ok {
		n.strangerControls.Add(1)
		return nil, false
	}
	if ib == nil {
		return nil, true
	}
	b = ib.(*bind) // the only Bind there is
	n.unpend(b)
	return b, true
}

// onAnchorDetach: the remote producer detached. The anchor stays, and a
// new producer may attach at once.
func (n *Node) onAnchorDetach(from ext.WorkerID, payload []byte) ([]byte, error) {
	start := n.opStart()
	st, err := n.target(payload)
	var b *bind
	if st != nil {
		b, _ = n.takeBind(st, from)
	}
	if b != nil {
		st.Terminate(b.proxy, inlet.DetachedFrame, true)
		st.CloseConn(b)
	}
	n.countControl(metrics.StreamDetach, start, b != nil)
	return UnitAnswer, err
}

// countControl counts a control handler's operation as the reference
// does: a success when it found something to act on.
func (n *Node) countControl(op metrics.StreamOp, start time.Time, found bool) {
	if met := n.met; met != nil {
		met.Operation(op, n.scheme, found, time.Since(start))
	}
}

// removeAnchor takes st out of its Manager's registry.
func removeAnchor(st *inlet.State) { st.Home().Owner.Remove(st) }

// onAnchorFinalize: the producer finished. The anchor leaves the registry
// and the consumer reads io.EOF after the items before. A producer
// attached on this worker is left alone.
func (n *Node) onAnchorFinalize(from ext.WorkerID, payload []byte) ([]byte, error) {
	start := n.opStart()
	st, err := n.target(payload)
	if st == nil {
		n.countControl(metrics.StreamFinalize, start, false)
		return UnitAnswer, err
	}
	b, ok := n.takeBind(st, from)
	if !ok {
		n.countControl(metrics.StreamFinalize, start, false)
		return UnitAnswer, nil
	}
	proxy := inlet.NewSender(st, false)
	if b != nil {
		proxy = b.proxy
	} else {
		if st.IsAttached() {
			n.countControl(metrics.StreamFinalize, start, false)
			return UnitAnswer, nil
		}
	}
	removeAnchor(st)
	st.Terminate(proxy, inlet.FinalizedFrame, false)
	if b != nil {
		st.CloseConn(b)
	}
	n.countControl(metrics.StreamFinalize, start, true)
	return UnitAnswer, nil
}

// onAnchorCancel: the producer gave up. The anchor leaves the registry,
// and the consumer reads ErrCancelled. The bind is taken first, so no
// _stream_cancel goes back to the producer that asked.
func (n *Node) onAnchorCancel(from ext.WorkerID, payload []byte) ([]byte, error) {
	st, err := n.target(payload)
	if st == nil {
		return UnitAnswer, err
	}
	b, ok := n.takeBind(st, from)
	if !ok {
		return UnitAnswer, nil
	}
	st.Cancel(false)
	if b != nil {
		st.CloseConn(b) // the producer asked; its connection has nothing more to carry
	}
	removeAnchor(st)
	return UnitAnswer, nil
}

// PeerLost ends what this path holds for worker w, whose node is gone:
// this node's streams to w's anchors fail at once (their connections may
// take longer to say so), and the streams bound for a producer on w whose
// connection never came end now instead of at the accept window.
func (n *Node) PeerLost(w ext.WorkerID) {
	n.consumerLost(w)
	var lost []*pendingBind
	n.mu.Lock()
	for k, pb := range n.pending {
		if pb.bind != nil && pb.bind.producer == w {
			delete(n.pending, k)
			pb.timer.Stop()
			lost = append(lost, pb)
		}
	}
	n.mu.Unlock()
	for _, pb := range lost {
		n.log.Warn("velo: stream bound but its producer's node was lost before it connected", "anchor", pb.bind.key.AnchorID)
		pb.st.DropBind(pb.bind)
	}
}
