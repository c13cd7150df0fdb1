package streaming

import (
	"context"
	"fmt"
	"net"
	"time"

	"github.com/velo-go/velo/ext"
	"github.com/velo-go/velo/internal/frame"
	"github.com/velo-go/velo/internal/msgrx"
	wire "github.com/velo-go/velo/internal/streamwire"
	"github.com/velo-go/velo/messenger"
	"github.com/velo-go/velo/streaming/internal/inlet"
	"github.com/velo-go/velo/streaming/internal/mux"
)

// MPSC anchors between workers (mpsc/control.rs of the reference).
//
// A producer on another worker asks the owner with _mpsc_anchor_attach
// (the body of _anchor_attach). The owner gives it the next SenderID at
// once and, when the producer offered no mux (over the mux it binds a
// slot instead, mux_attach.go), binds a routing session on the per-stream
// TCP listener, and
// answers with the key, the heartbeat interval, the SenderID and the
// routing session. The producer then opens one connection exactly as an
// SPSC producer does: the same 16-byte preamble (the anchor's local id,
// MPSC bit included, and the routing session) and the same stream frames.
// The frames carry no SenderID: the owner knows the producer from the
// routing session of its connection, and tags each frame as it enters the
// inlet. So nothing on the wire is new.
//
// On the owner, one reader goroutine per remote producer feeds the shared
// inlet. Whatever ends that producer — its Detached or Dropped frame, its
// connection closing, its silence for detectionMultiplier heartbeat
// windows, _mpsc_anchor_detach, or no connection within its connect window —
// gives the consumer that producer's MPSCDetached or MPSCDropped, and the
// stream goes on. The consumer's Cancel or Close closes every producer's
// connection and sends each producer _stream_cancel (to the stream id of
// its attach request), as the reference does; the closed connection is the
// backstop if the message is lost. Either way their sends fail with
// ErrCancelled.

// registerMPSC adds the three MPSC control handlers of the owner.
func (r *remote) registerMPSC() error {
	for _, h := range []messenger.Handler{
		messenger.UnaryHandler(wire.MPSCAnchorAttachHandler, r.onMPSCAttach, messenger.WithInline()), // as _anchor_attach
		messenger.UnaryHandler(wire.MPSCAnchorDetachHandler, r.onMPSCDetach),
		messenger.UnaryHandler(wire.MPSCAnchorCancelHandler, r.onMPSCCancel),
	} {
		if err := msgrx.RegisterSystem(r.msg, h); err != nil {
			return err
		}
	}
	return nil
}

func refuseMPSCAttach(format string, args ...any) ([]byte, error) {
	resp := wire.MPSCAttachResponse{Refused: true, Reason: fmt.Sprintf(format, args...)}
	return resp.AppendJSON(nil), nil
}

// onMPSCAttach is the _mpsc_anchor_attach handler, counted as the SPSC
// one is.
func (r *remote) onMPSCAttach(c *messenger.Context) ([]byte, error) {
	return r.countAttach(c, r.mpscAttach)
}

func (r *remote) mpscAttach(c *messenger.Context) ([]byte, error) {
	req, err := wire.DecodeAttachRequest(c.Payload)
	if err != nil {
		return nil, err
	}
	if !req.Handle.IsMPSC() {
		return refuseMPSCAttach("anchor %v is spsc; use _anchor_attach", req.Handle)
	}
	useMux := r.mux != nil && offersMux(req.SupportedTransportKeys)
	if !useMux && r.ln == nil {
		return refuseMPSCAttach("this node serves streams only over %s", mux.WireKey)
	}
	st := r.m.lookup(req.Handle.LocalID())
	if st == nil || st.MPSC() == nil {
		return refuseMPSCAttach("mpsc anchor %v not found", req.Handle)
	}
	p, ok := st.MPSC().AddRemote(c.SenderWorkerID())
	if !ok {
		return refuseMPSCAttach("mpsc anchor %v not found", req.Handle)
	}
	if useMux {
		return r.attachMPSCMux(st, p, c.SenderWorkerID(), req.LaneKey)
	}
	ctl := &remoteBind{r: r, producer: c.SenderWorkerID(), streamID: req.CancelHandle.StreamID()} // the sender, not the body's word
	if st.MPSC().SetControl(p, ctl) {
		// A stop made before this producer attached is kept: the producer
		// registered its sender before it asked, so this cannot come early.
		ctl.signal(streamStopHandler)
	}
	// A routing session of our own: producers on different workers may
	// use the same session id.
	key := wire.TCPPreamble{AnchorID: req.Handle.LocalID(), SessionID: r.ids.next()}
	pb := &pendingBind{st: st, mpsc: p}
	r.mu.Lock()
	if r.closed {
		r.mu.Unlock()
		st.MPSC().EndRemote(p, droppedFrame)
		return refuseMPSCAttach("node is shutting down")
	}
	r.pending[key] = pb
	pb.timer = time.AfterFunc(r.mpscConnectWindow(), func() { r.expireMPSC(key, pb) })
	r.mu.Unlock()
	resp := wire.MPSCAttachResponse{
		TransportKey:        wire.TCPStreamKey,
		HeartbeatIntervalMS: uint64(r.heartbeat / time.Millisecond),
		SenderID:            uint64(p.ID()),
		RoutingSessionID:    key.SessionID,
	}
	return resp.AppendJSON(nil), nil
}

// mpscConnectWindow is how long the owner waits for the connection of a
// producer it counted. The reference's per-sender reader starts its
// heartbeat watch at the attach, so a producer that never connects is
// dropped after detectionMultiplier windows, or the accept window if that
// is shorter.
func (r *remote) mpscConnectWindow() time.Duration {
	return min(r.acceptWindow, detectionMultiplier*r.heartbeat)
}

// expireMPSC drops a counted producer whose connection did not come in
// time, unless something else ended it first (a release after a failed
// dial, the consumer's cancel).
func (r *remote) expireMPSC(key wire.TCPPreamble, pb *pendingBind) {
	r.mu.Lock()
	if r.pending[key] != pb {
		r.mu.Unlock()
		return
	}
	delete(r.pending, key)
	r.mu.Unlock()
	st := pb.st
	if !st.MPSC().RemoteEnded(pb.mpsc) {
		r.log.Warn("velo: MPSC producer counted but never connected", "anchor", key.AnchorID, "sender_id", uint64(pb.mpsc.ID()))
		st.MPSC().EndRemote(pb.mpsc, droppedFrame)
	}
}

// onMPSCDetach is the _mpsc_anchor_detach handler: the consumer reads the
// producer's MPSCDetached, and its connection, if any, is closed.
func (r *remote) onMPSCDetach(c *messenger.Context) ([]byte, error) {
	req, err := wire.DecodeMPSCDetachRequest(c.Payload)
	if err != nil {
		return nil, err
	}
	st := r.m.lookup(req.Handle.LocalID())
	if st == nil || st.MPSC() == nil {
		return unitAnswer, nil // gone already: nothing to do, as in the reference
	}
	a := st.MPSC()
	p := a.Remote(SenderID(req.SenderID))
	if p == nil {
		return unitAnswer, nil
	}
	if p.Worker() != c.SenderWorkerID() {
		r.strangerSignals.Add(1) // another worker's producer: left alone
		return unitAnswer, nil
	}
	a.EndRemote(p, detachedFrame)
	if conn := a.RemoteConn(p); conn != nil {
		conn.Close() // ends its reader; the producer sees the stream cancelled
	}
	return unitAnswer, nil
}

// onMPSCCancel is the _mpsc_anchor_cancel handler: a producer cancels the
// whole anchor. It is the consumer's Close done from afar: the consumer's
// Next returns ErrCancelled and every producer's connection is closed.
func (r *remote) onMPSCCancel(c *messenger.Context) ([]byte, error) {
	req, err := wire.DecodeHandleRequest(c.Payload)
	if err != nil {
		return nil, err
	}
	if st := r.m.lookup(req.Handle.LocalID()); st != nil && st.MPSC() != nil {
		st.Cancel(true)
	}
	return unitAnswer, nil
}

// serveMPSC reads the connection of remote producer p into the anchor's
// inlet, each frame tagged with p's SenderID, until p ends. Whatever ends
// the read ends p alone.
func (r *remote) serveMPSC(c net.Conn, a *inlet.MPSC, p *inlet.Remote) {
	defer a.EndRemote(p, droppedFrame) // a no-op after an explicit end
	if !a.ConnectRemote(p, c) {
		return // closing the connection tells the producer
	}
	fr := frame.NewReader(c, wire.MaxTCPFrame)
	defer fr.Close()
	var wd watchdog
	wd.start(c, r.heartbeat)
	for {
		f, err := fr.Next()
		if timeout, fire := wd.expired(err); fire {
			r.fireMPSC(a, p)
			return
		} else if timeout {
			continue
		}
		if err != nil {
			return // the connection ended with no terminal: Dropped
		}
		if f.Type != ext.Message || len(f.Header) != 0 {
			msg := fmt.Sprintf("per-stream frame of type %d with a %d-byte header", f.Type, len(f.Header))
			a.EndRemote(p, wire.AppendErrorFrame(nil, wire.KindTransportError, msg))
			return
		}
		if string(f.Payload) == wire.HeartbeatFrame {
			wd.frame()
			continue
		}
		if end := mpscTerminal(f.Payload); end != nil {
			a.EndRemote(p, end)
			return
		}
		if a.Push(context.Background(), p.Sender(), p.ID(), f.Payload) != nil {
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
		return detachedFrame
	case wire.DroppedFrame:
		return droppedFrame
	}
	if len(p) > 2 && p[0] == 0x81 && p[1] == 0xae { // {"TransportError": …}
		return p
	}
	return nil
}

// fireMPSC ends a silent remote producer as Dropped, for it alone. An
// MPSC reader neither logs nor counts a watchdog firing, as in the
// reference: WatchdogFirings and its warning stay SPSC signals.
func (r *remote) fireMPSC(a *inlet.MPSC, p *inlet.Remote) {
	a.EndRemote(p, droppedFrame)
}

// attachMPSCRemote makes the _mpsc_anchor_attach round trip to the
// handle's owner and opens the producer's connection.
func attachMPSCRemote[T any](ctx context.Context, r *remote, handle wire.AnchorHandle, encode func(T) ([]byte, error), key *uint64) (*MPSCSender[T], error) {
	info, err := r.reachOwner(ctx, handle)
	if err != nil {
		return nil, err
	}
	owner := info.InstanceID
	addr, err := r.streamAddr(handle, info)
	if err != nil {
		return nil, err
	}
	// Registered before the request leaves, so that a stop the owner
	// sends at the attach finds it (control.go).
	rs := newRemoteSender(r, handle, r.ids.next())
	r.addSender(rs)
	ok := false
	defer func() {
		if !ok {
			r.dropSender(rs)
		}
	}()
	var resp wire.MPSCAttachResponse
	err = r.askAttach(ctx, owner, wire.MPSCAnchorAttachHandler, rs, key, func(body []byte) (string, string, error) {
		var err error
		resp, err = wire.DecodeMPSCAttachResponse(body)
		return resp.TransportKey, refusalOf(resp.Refused, resp.Reason), err
	})
	if err != nil {
		return nil, err
	}
	if resp.TransportKey == mux.WireKey && r.mux != nil {
		// The registry (dropped by the deferred func) is for the
		// per-stream path: the mux signals its slot.
		return openMuxMPSCSender(ctx, r, owner, handle, resp, encode)
	}
	_, err = r.openStream(ctx, rs, addr, resp.TransportKey, resp.RoutingSessionID, resp.HeartbeatIntervalMS)
	if err != nil {
		r.releaseMPSC(owner, handle, resp.SenderID)
		return nil, err
	}
	ok = true
	return &MPSCSender[T]{producer: producer[T]{sink: rs, encode: encode}, id: SenderID(resp.SenderID)}, nil
}

// openMuxMPSCSender opens the slot of an MPSC producer the owner bound for
// the mux.
func openMuxMPSCSender[T any](ctx context.Context, r *remote, owner ext.InstanceID, handle wire.AnchorHandle, resp wire.MPSCAttachResponse, encode func(T) ([]byte, error)) (*MPSCSender[T], error) {
	s, err := openMuxSlot(ctx, r, handle, resp.RoutingSessionID, resp.InitialCredit, resp.Lane, false)
	if err != nil {
		r.releaseMPSC(owner, handle, resp.SenderID)
		return nil, err
	}
	return &MPSCSender[T]{producer: producer[T]{sink: s, encode: encode}, id: SenderID(resp.SenderID)}, nil
}

// releaseTimeout bounds the release of a producer whose connection failed.
const releaseTimeout = time.Second

// releaseMPSC tells the owner that a producer it counted will not connect
// (_mpsc_anchor_detach), so that the consumer reads its MPSCDetached now
// and not after the owner's connect window. It is best effort: if it
// fails, that window still ends the producer.
func (r *remote) releaseMPSC(owner ext.InstanceID, handle wire.AnchorHandle, id uint64) {
	ctx, cancel := context.WithTimeout(context.Background(), releaseTimeout)
	defer cancel()
	req := wire.MPSCDetachRequest{Handle: handle, SenderID: id}
	r.msg.Unary(ctx, owner, wire.MPSCAnchorDetachHandler, req.AppendJSON(nil))
}

// attachMPSCMux binds producer p of an MPSC anchor for the mux: its
// OpenSlot claims the bind, and its records carry its SenderID at the
// consumer. Stop and cancel reach it as LifecycleSlot and CloseSlot.
func (r *remote) attachMPSCMux(st *inlet.State, p *inlet.Remote, producer ext.WorkerID, key *uint64) ([]byte, error) {
	session := r.ids.next()
	lane, ok := r.mux.BindProducer(st, p, producer, session, r.muxAcceptWindow(), r.lanesTo(producer), key)
	if !ok {
		st.MPSC().EndRemote(p, droppedFrame)
		return refuseMPSCAttach("node is shutting down")
	}
	resp := wire.MPSCAttachResponse{
		TransportKey:        mux.WireKey,
		HeartbeatIntervalMS: uint64(r.heartbeat / time.Millisecond),
		SenderID:            uint64(p.ID()),
		RoutingSessionID:    session,
		InitialCredit:       r.mux.Cfg.InitialCredit,
		SlotByteBudget:      uint32(r.mux.Cfg.SlotByteBudget),
		Lane:                uint8(lane),
	}
	return resp.AppendJSON(nil), nil
}
