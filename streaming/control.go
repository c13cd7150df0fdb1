package streaming

import (
	"context"
	"errors"
	"fmt"
	"net"
	"time"

	"github.com/velo-go/velo/ext"
	"github.com/velo-go/velo/internal/msgerr"
	"github.com/velo-go/velo/internal/msgrx"
	"github.com/velo-go/velo/internal/msgwire"
	wire "github.com/velo-go/velo/internal/streamwire"
	"github.com/velo-go/velo/messenger"
	"github.com/velo-go/velo/metrics"
	"github.com/velo-go/velo/streaming/internal/inlet"
)

// Control messages between the two ends of a stream between workers
// (control.rs of the reference).
//
// The producer's node keeps its remote senders in a registry keyed by the
// stream id of the CancelHandle it sent in _anchor_attach. The consumer's
// node sends _stream_stop and _stream_cancel to that id, fire-and-forget.
// The owner of an anchor serves _anchor_detach, _anchor_finalize and
// _anchor_cancel, as the reference registers them, for a producer that
// ends its stream by message instead of by a terminal frame. Neither a Go
// producer nor the reference's 0.9 producer sends them: a terminal frame
// on the stream says the same.

// streamStopHandler is the producer's handler for a consumer's graceful
// stop. It is Go-defined (the Rust reference's release 0.9 has no such
// handler, so a Rust producer does not see a stop); its body is that of
// _stream_cancel.
const streamStopHandler = wire.StreamStopHandler

// unitAnswer is the answer of a handler that returns nothing: serde_json
// writes Rust's () as null, and a Rust caller decodes it.
var unitAnswer = []byte("null")

// remoteBind is a stream that _anchor_attach bound on this node: the
// producer to signal, and the proxy sender that feeds the inlet for it.
// The inlet keeps it as its inlet.Bind; no bind means no remote producer
// to signal.
type remoteBind struct {
	r        *remote
	key      wire.TCPPreamble // the bind's entry in remote.pending
	producer ext.WorkerID
	streamID uint64 // the producer's id for the stream (CancelHandle)
	proxy    *inlet.Sender
	conn     net.Conn // set by the inlet once the connection came (ConnectBind); guarded by the anchor's lock
}

// The inlet.Bind of the per-stream path.
func (b *remoteBind) Producer() ext.WorkerID { return b.producer }
func (b *remoteBind) Proxy() *inlet.Sender   { return b.proxy }
func (b *remoteBind) Conn() net.Conn         { return b.conn }
func (b *remoteBind) SetConn(c net.Conn)     { b.conn = c }
func (b *remoteBind) Signal(handler string)  { b.signal(handler) }
func (b *remoteBind) Unpend()                { b.r.unpend(b) }

// signal tells the producer of the stream to stop or cancel. It never
// waits: a stalled peer must not hold up the consumer. A lost message is
// covered for a cancel by the closing of the connection.
func (b *remoteBind) signal(handler string) {
	inst, ok := msgrx.InstanceOf(b.r.msg, b.producer)
	if !ok {
		return
	}
	body := (&wire.StreamCancelRequest{SenderStreamID: b.streamID}).AppendJSON(nil)
	if err := msgrx.Post(b.r.msg, inst, handler, body); err != nil {
		b.r.log.Debug("velo: stream control message not sent", "handler", handler, "err", err)
	}
}

// registerControl registers the control handlers of both ends. All are
// drain-exempt: they serve streams that were already accepted.
func (r *remote) registerControl() error {
	ex := messenger.WithDrainExempt()
	for _, h := range []messenger.Handler{
		messenger.FireHandler(wire.StreamCancelHandler, r.onStreamCancel, ex),
		messenger.FireHandler(streamStopHandler, r.onStreamStop, ex),
		messenger.UnaryHandler(wire.AnchorDetachHandler, r.onAnchorDetach, ex),
		messenger.UnaryHandler(wire.AnchorFinalizeHandler, r.onAnchorFinalize, ex),
		messenger.UnaryHandler(wire.AnchorCancelHandler, r.onAnchorCancel, ex),
		messenger.UnaryHandler(anchorRenewHandler, r.onAnchorRenew, ex),
	} {
		if err := msgrx.RegisterSystem(r.msg, h); err != nil {
			return err
		}
	}
	msgrx.OnPeerLost(r.msg, func(peer ext.InstanceID, err error) {
		r.m.openerLost(peer) // first: its pending binds end as lost openers, not as drops
		r.peerLost(peer.WorkerID(), errors.Is(err, ext.ErrPeerShutdown))
	})
	return nil
}

// addSender and dropSender keep the registry of this node's remote senders.
func (r *remote) addSender(rs *remoteSender) {
	r.sendersMu.Lock()
	r.senders[rs.id] = rs
	r.sendersMu.Unlock()
}

func (r *remote) dropSender(rs *remoteSender) {
	r.sendersMu.Lock()
	if r.senders[rs.id] == rs {
		delete(r.senders, rs.id)
	}
	r.sendersMu.Unlock()
}

// sender finds the sender a control message names. Only the anchor's
// owner may signal it: the stream id is random (ids.go), and the
// messenger stamps each request with its sender's worker as well.
func (r *remote) sender(c *messenger.Context) *remoteSender {
	req, err := wire.DecodeStreamCancelRequest(c.Payload)
	if err != nil {
		return nil
	}
	r.sendersMu.Lock()
	rs := r.senders[req.SenderStreamID]
	r.sendersMu.Unlock()
	if rs == nil {
		return nil
	}
	if rs.handle.Owner() != c.SenderWorkerID() {
		r.strangerSignals.Add(1)
		return nil
	}
	return rs
}

// activeSenders counts this node's remote senders that a stop or cancel
// can still reach: attaching or streaming.
func (m *Manager) activeSenders() int {
	if m.remote == nil {
		return 0
	}
	m.remote.sendersMu.Lock()
	defer m.remote.sendersMu.Unlock()
	return len(m.remote.senders)
}

// onStreamCancel: the consumer cancelled. Idempotent; an unknown id is a
// stream that already ended.
func (r *remote) onStreamCancel(c *messenger.Context) {
	if rs := r.sender(c); rs != nil {
		r.dropSender(rs)
		rs.fail(ErrCancelled)
	}
}

// onStreamStop: the consumer asks for a graceful end. The sender stays
// registered: a cancel may still follow.
func (r *remote) onStreamStop(c *messenger.Context) {
	if rs := r.sender(c); rs != nil {
		rs.stop()
	}
}

// target finds the SPSC anchor a handle request names, or nil: an unknown,
// ended or MPSC anchor makes these handlers successful no-ops.
func (r *remote) target(payload []byte) (*inlet.State, error) {
	req, err := wire.DecodeHandleRequest(payload)
	if err != nil {
		return nil, err
	}
	if req.Handle.Owner() != r.m.owner || req.Handle.IsMPSC() {
		return nil, nil
	}
	return r.m.lookup(req.Handle.LocalID()), nil
}

// takeBind detaches the remote bind from st and forgets its pending entry.
// It returns nil when no remote producer was bound. A request from another
// worker than the bound producer takes nothing (ok false): the handle is a
// capability the consumer hands out, but a stream with a producer belongs
// to that producer, and the messenger has bound the asker to its
// connection.
func (r *remote) takeBind(st *inlet.State, asker ext.WorkerID) (b *remoteBind, ok bool) {
	ib, ok := st.TakeBindFrom(asker)
	if !ok {
		r.strangerControls.Add(1)
		return nil, false
	}
	if ib == nil {
		return nil, true
	}
	b = ib.(*remoteBind) // the only Bind there is
	r.unpend(b)
	return b, true
}

// onAnchorDetach: the remote producer detached. The anchor stays, and a
// new producer may attach at once.
func (r *remote) onAnchorDetach(c *messenger.Context) ([]byte, error) {
	start := r.m.opStart()
	st, err := r.target(c.Payload)
	var b *remoteBind
	if st != nil {
		b, _ = r.takeBind(st, c.SenderWorkerID())
	}
	if b != nil {
		st.Terminate(b.proxy, detachedFrame, true)
		st.CloseConn(b)
	}
	r.countControl(metrics.StreamDetach, start, b != nil)
	return unitAnswer, err
}

// countControl counts a control handler's operation as the reference
// does: a success when it found something to act on.
func (r *remote) countControl(op metrics.StreamOp, start time.Time, found bool) {
	if met := r.m.met; met != nil {
		met.Operation(op, metrics.SchemeTCPStream, found, time.Since(start))
	}
}

// onAnchorFinalize: the producer finished. The anchor leaves the registry
// and the consumer reads io.EOF after the items before. A producer
// attached on this worker is left alone.
func (r *remote) onAnchorFinalize(c *messenger.Context) ([]byte, error) {
	start := r.m.opStart()
	st, err := r.target(c.Payload)
	if st == nil {
		r.countControl(metrics.StreamFinalize, start, false)
		return unitAnswer, err
	}
	b, ok := r.takeBind(st, c.SenderWorkerID())
	if !ok {
		r.countControl(metrics.StreamFinalize, start, false)
		return unitAnswer, nil
	}
	proxy := inlet.NewSender(st, false)
	if b != nil {
		proxy = b.proxy
	} else {
		if st.IsAttached() {
			r.countControl(metrics.StreamFinalize, start, false)
			return unitAnswer, nil
		}
	}
	r.m.remove(st)
	st.Terminate(proxy, finalizedFrame, false)
	if b != nil {
		st.CloseConn(b)
	}
	r.countControl(metrics.StreamFinalize, start, true)
	return unitAnswer, nil
}

// onAnchorCancel: the producer gave up. The anchor leaves the registry,
// and the consumer reads ErrCancelled. The bind is taken first, so no
// _stream_cancel goes back to the producer that asked.
func (r *remote) onAnchorCancel(c *messenger.Context) ([]byte, error) {
	st, err := r.target(c.Payload)
	if st == nil {
		return unitAnswer, err
	}
	b, ok := r.takeBind(st, c.SenderWorkerID())
	if !ok {
		return unitAnswer, nil
	}
	st.Cancel(false)
	if b != nil {
		st.CloseConn(b) // the producer asked; its connection has nothing more to carry
	}
	r.m.remove(st)
	return unitAnswer, nil
}

// unpend forgets the pending entry of b, if its connection never came.
func (r *remote) unpend(b *remoteBind) {
	r.mu.Lock()
	pb := r.pending[b.key]
	if pb != nil && pb.bind == b {
		delete(r.pending, b.key)
		pb.timer.Stop()
	}
	r.mu.Unlock()
}

// peerLost ends at once the streams bound for a producer whose node is
// gone and whose connection never came, instead of at the accept window.
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
	r.consumerLost(w)
	var lost []*pendingBind
	r.mu.Lock()
	for k, pb := range r.pending {
		if pb.bind != nil && pb.bind.producer == w {
			delete(r.pending, k)
			pb.timer.Stop()
			lost = append(lost, pb)
		}
	}
	r.mu.Unlock()
	for _, pb := range lost {
		r.log.Warn("velo: stream bound but its producer's node was lost before it connected", "anchor", pb.bind.key.AnchorID)
		pb.st.DropBind(pb.bind)
	}
}

// consumerLost fails at once this node's per-stream senders to anchors of
// w, whose node is gone: their connections may take longer to say so.
func (r *remote) consumerLost(w ext.WorkerID) {
	var lost []*remoteSender
	r.sendersMu.Lock()
	for _, rs := range r.senders {
		if rs.handle.Owner() == w {
			lost = append(lost, rs)
		}
	}
	r.sendersMu.Unlock()
	for _, rs := range lost {
		rs.fail(ErrConsumerLost)
	}
}

// anchorRenewHandler renews unattached reservations on their owner. Go
// defines it (reference 0.9 has none); see docs/wire.md.
const anchorRenewHandler = wire.AnchorRenewHandler

// onAnchorRenew renews the local anchors a batch names, with the rules of
// RenewReservations: every entry that cannot be renewed is a no-op.
func (r *remote) onAnchorRenew(c *messenger.Context) ([]byte, error) {
	req, err := wire.DecodeRenewRequest(c.Payload)
	if err != nil {
		return nil, err
	}
	r.renewRequests.Add(1)
	for _, h := range req.Handles {
		if h.Owner() == r.m.owner {
			r.m.renewLocal(h)
		}
	}
	return unitAnswer, nil
}

// renewRemote renews the reservations of other workers: one unary call
// per batch of at most wire.MaxRenewBatch handles of one owner. It stops
// at the first failure of an owner and goes on with the next owner.
func (r *remote) renewRemote(ctx context.Context, byOwner map[ext.WorkerID][]wire.AnchorHandle) error {
	var errs []error
	for owner, hs := range byOwner {
		if err := r.renewOwner(ctx, owner, hs); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

func (r *remote) renewOwner(ctx context.Context, owner ext.WorkerID, hs []wire.AnchorHandle) error {
	inst, ok := msgrx.InstanceOf(r.msg, owner)
	if !ok {
		return fmt.Errorf("velo: renew on worker %v: %w", owner, messenger.ErrPeerNotRegistered)
	}
	// The owner answers through its peer table, as for an attach.
	if err := msgrx.Handshake(r.msg, ctx, inst); err != nil && !errors.Is(err, messenger.ErrShuttingDown) {
		return fmt.Errorf("velo: renew on worker %v: %w", owner, err)
	}
	for len(hs) > 0 {
		n := min(len(hs), wire.MaxRenewBatch)
		req := wire.RenewRequest{Handles: hs[:n]}
		if _, err := r.msg.Unary(ctx, inst, anchorRenewHandler, req.AppendJSON(nil)); err != nil {
			return fmt.Errorf("velo: renew %d reservation(s) on worker %v: %w", len(hs), owner, msgerr.NameOp(err, "stream renew"))
		}
		hs = hs[n:]
	}
	return nil
}
