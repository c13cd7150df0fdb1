package framepath

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/velo-go/velo/ext"
	wire "github.com/velo-go/velo/internal/streamwire"
	"github.com/velo-go/velo/streaming/internal/inlet"
)

// MPSC anchors on this path (mpsc/control.rs of the reference).
//
// The owner gives a producer its SenderID at the attach and, when the
// producer offered no mux, binds a routing session here. The producer then
// connects exactly as an SPSC producer does: the same preamble (the
// anchor's local id, MPSC bit included, and the routing session) and the
// same frames. The frames carry no SenderID: the owner knows the producer
// from the routing session of its connection and tags each frame as it
// enters the inlet, so nothing on the wire is new.
//
// One reader per remote producer feeds the shared inlet. Whatever ends
// that producer (its Detached or Dropped frame, its connection closing,
// its silence for wire.DetectionMultiplier heartbeat windows,
// _mpsc_anchor_detach, or no connection within its connect window) gives
// the consumer that producer's MPSCDetached or MPSCDropped, and the stream
// goes on. The consumer's Cancel or Close, done in the inlet, closes every
// producer's connection and sends each producer _stream_cancel through its
// bind (to the stream id of its attach request), as the reference does;
// the closed connection is the backstop if the message is lost.

// RefuseMPSCAttach is the answer of an _mpsc_anchor_attach that bound
// nothing, as RefuseAttach is for an SPSC anchor.
func RefuseMPSCAttach(format string, args ...any) ([]byte, error) {
	resp := wire.MPSCAttachResponse{Refused: true, Reason: fmt.Sprintf(format, args...)}
	return resp.AppendJSON(nil), nil
}

// BindMPSC is the part of _mpsc_anchor_attach that this path serves: the
// node counted p, a producer of the MPSC anchor st, for producer's worker
// and chose this path. It keeps the producer to signal (streamID, from
// the request's cancel handle), binds a routing session for its
// connection and returns the answer, a refusal included.
func (n *Node) BindMPSC(st *inlet.State, p *inlet.Remote, handle wire.AnchorHandle, producer ext.WorkerID, streamID uint64) ([]byte, error) {
	ctl := &bind{n: n, producer: producer, streamID: streamID}
	if st.MPSC().SetControl(p, ctl) {
		// A stop made before this producer attached is kept: the producer
		// registered its sender before it asked, so this cannot come early.
		ctl.signal(wire.StreamStopHandler)
	}
	// A routing session of our own: producers on different workers may
	// use the same session id.
	key := ext.StreamRoute{AnchorID: handle.LocalID(), SessionID: n.nextID()}
	pb := &pendingBind{st: st, mpsc: p}
	n.mu.Lock()
	if n.closed {
		n.mu.Unlock()
		st.MPSC().EndRemote(p, inlet.DroppedFrame)
		return RefuseMPSCAttach("node is shutting down")
	}
	n.pending[key] = pb
	pb.timer = time.AfterFunc(n.mpscConnectWindow(), func() { n.expireMPSC(key, pb) })
	n.mu.Unlock()
	resp := wire.MPSCAttachResponse{
		TransportKey:        n.key,
		HeartbeatIntervalMS: uint64(n.heartbeat / time.Millisecond),
		SenderID:            uint64(p.ID()),
		RoutingSessionID:    key.SessionID,
	}
	return resp.AppendJSON(nil), nil
}

// mpscConnectWindow is how long the owner waits for the connection of a
// producer it counted. The reference's per-sender reader starts its
// heartbeat watch at the attach, so a producer that never connects is
// dropped after wire.DetectionMultiplier windows, or the accept window if that
// is shorter.
func (n *Node) mpscConnectWindow() time.Duration {
	return min(n.acceptWindow, wire.DetectionMultiplier*n.heartbeat)
}

// expireMPSC drops a counted producer whose connection did not come in
// time, unless something else ended it first (a release after a failed
// dial, the consumer's cancel).
func (n *Node) expireMPSC(key ext.StreamRoute, pb *pendingBind) {
	if !n.takePending(key, pb) {
		return
	}
	st := pb.st
	if !st.MPSC().RemoteEnded(pb.mpsc) {
		n.log.Warn("velo: MPSC producer counted but never connected", "anchor", key.AnchorID, "sender_id", uint64(pb.mpsc.ID()))
		st.MPSC().EndRemote(pb.mpsc, inlet.DroppedFrame)
	}
}

// onMPSCDetach is the _mpsc_anchor_detach handler: the consumer reads the
// producer's MPSCDetached, and its connection, if any, is closed.
func (n *Node) onMPSCDetach(from ext.WorkerID, payload []byte) ([]byte, error) {
	req, err := wire.DecodeMPSCDetachRequest(payload)
	if err != nil {
		return nil, err
	}
	st := n.host.Anchor(req.Handle.LocalID())
	if st == nil || st.MPSC() == nil {
		return UnitAnswer, nil // gone already: nothing to do, as in the reference
	}
	a := st.MPSC()
	p := a.Remote(inlet.SenderID(req.SenderID))
	if p == nil {
		return UnitAnswer, nil
	}
	if p.Worker() != from {
		n.strangerSignals.Add(1) // another worker's producer: left alone
		return UnitAnswer, nil
	}
	a.EndRemote(p, inlet.DetachedFrame)
	if conn := a.RemoteConn(p); conn != nil {
		conn.Close() // ends its reader; the producer sees the stream cancelled
	}
	return UnitAnswer, nil
}

// onMPSCCancel is the _mpsc_anchor_cancel handler: a producer cancels the
// whole anchor. It is the consumer's Close done from afar: the consumer's
// Next returns ErrCancelled and every producer's connection is closed.
func (n *Node) onMPSCCancel(_ ext.WorkerID, payload []byte) ([]byte, error) {
	req, err := wire.DecodeHandleRequest(payload)
	if err != nil {
		return nil, err
	}
	if st := n.host.Anchor(req.Handle.LocalID()); st != nil && st.MPSC() != nil {
		st.Cancel(true)
	}
	return UnitAnswer, nil
}

// serveMPSC reads the stream of remote producer p into the anchor's
// inlet, each frame tagged with p's SenderID, until p ends. Whatever ends
// the read ends p alone.
func (n *Node) serveMPSC(in ext.FrameInbound, a *inlet.MPSC, p *inlet.Remote) {
	defer a.EndRemote(p, inlet.DroppedFrame) // a no-op after an explicit end
	if !a.ConnectRemote(p, in) {
		return // closing the stream tells the producer
	}
	var wd watchdog
	wd.start(in, n.heartbeat)
	for {
		f, err := in.Recv()
		if timeout, fire := wd.expired(err); fire {
			fireMPSC(a, p)
			return
		} else if timeout {
			continue
		}
		if errors.Is(err, ext.ErrMalformedStream) {
			a.EndRemote(p, wire.AppendErrorFrame(nil, wire.KindTransportError, err.Error()))
			return
		}
		if err != nil {
			return // the stream ended with no terminal: Dropped
		}
		if string(f) == wire.HeartbeatFrame {
			wd.frame()
			continue
		}
		if end := mpscTerminal(f); end != nil {
			a.EndRemote(p, end)
			in.Confirm()
			return
		}
		if a.Push(context.Background(), p.Sender(), p.ID(), f) != nil {
			return // cancelled, or p was ended by _mpsc_anchor_detach
		}
		wd.frame()
	}
}

// mpscTerminal returns the frame that ends a remote producer for a
// terminal it sent, or nil. A producer cannot finalize an MPSC anchor: a
// Finalized is read as Detached, as the reference does.
func mpscTerminal(p []byte) []byte {
	switch string(p) {
	case wire.FinalizedFrame, wire.DetachedFrame:
		return inlet.DetachedFrame
	case wire.DroppedFrame:
		return inlet.DroppedFrame
	}
	if isTransportError(p) {
		return p
	}
	return nil
}

// fireMPSC ends a silent remote producer as Dropped, for it alone. An
// MPSC reader neither logs nor counts a watchdog firing, as in the
// reference: the firings count and its warning stay SPSC signals.
func fireMPSC(a *inlet.MPSC, p *inlet.Remote) {
	a.EndRemote(p, inlet.DroppedFrame)
}
