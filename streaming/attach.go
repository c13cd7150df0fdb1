package streaming

import (
	"bytes"
	"time"

	"github.com/velo-go/velo/ext"
	wire "github.com/velo-go/velo/internal/streamwire"
	"github.com/velo-go/velo/messenger"
	"github.com/velo-go/velo/metrics"
	"github.com/velo-go/velo/streaming/internal/framepath"
	"github.com/velo-go/velo/streaming/internal/inlet"
	"github.com/velo-go/velo/streaming/internal/mux"
)

// The owner's attach handlers, _anchor_attach and _mpsc_anchor_attach:
// they find the anchor, then bind it for the mux when the producer offers
// it (mux_attach.go) and on the per-stream path otherwise (framepath.Bind,
// framepath.BindMPSC), and count the attach under the transport it took.

// refusedPrefix starts every refusal that refuseAttach writes.
var refusedPrefix = framepath.RefusedPrefix

// refuseAttach is the answer of an _anchor_attach that bound nothing.
func refuseAttach(format string, args ...any) ([]byte, error) {
	return framepath.RefuseAttach(format, args...)
}

// onAttach is the _anchor_attach handler: it binds the stream for the mux
// when the producer offers it, on the per-stream listener otherwise, and
// answers with the key and the routing session.
func (r *remote) onAttach(c *messenger.Context) ([]byte, error) {
	return r.countAttach(c, r.attach)
}

// countAttach runs an attach handler and counts it under the transport
// its answer names. Refused attaches are answered, not failed: they count
// as errors.
func (r *remote) countAttach(c *messenger.Context, attach func(*messenger.Context) ([]byte, error)) ([]byte, error) {
	start := r.m.opStart()
	body, err := attach(c)
	if met := r.m.met; met != nil {
		ok := err == nil && !bytes.HasPrefix(body, refusedPrefix)
		sc := r.tcp.Scheme()
		if bytes.Contains(body, []byte(mux.WireKey)) {
			sc = metrics.SchemeMux
		}
		met.Operation(metrics.StreamAttach, sc, ok, time.Since(start))
	}
	return body, err
}

func (r *remote) attach(c *messenger.Context) ([]byte, error) {
	req, err := wire.DecodeAttachRequest(c.Payload)
	if err != nil {
		return nil, err
	}
	if req.Handle.IsMPSC() {
		return refuseAttach("anchor %v is mpsc; use _mpsc_anchor_attach", req.Handle)
	}
	st := r.m.lookup(req.Handle.LocalID())
	if st == nil {
		return refuseAttach("anchor %v not found", req.Handle)
	}
	if r.mux != nil && offersMux(req.SupportedTransportKeys) {
		return r.attachMux(st, c.SenderWorkerID(), req.LaneKey)
	}
	// The producer is the worker the connection speaks for, not the one
	// the body's cancel handle names.
	return r.tcp.Bind(st, req.Handle, c.SenderWorkerID(), req.CancelHandle.StreamID())
}

// onMPSCAttach is the _mpsc_anchor_attach handler, counted as the SPSC
// one is.
func (r *remote) onMPSCAttach(c *messenger.Context) ([]byte, error) {
	return r.countAttach(c, r.mpscAttach)
}

// mpscAttach gives the producer the next SenderID at once and binds it
// for the mux, or on the per-stream path when it offered no mux.
func (r *remote) mpscAttach(c *messenger.Context) ([]byte, error) {
	req, err := wire.DecodeAttachRequest(c.Payload)
	if err != nil {
		return nil, err
	}
	if !req.Handle.IsMPSC() {
		return framepath.RefuseMPSCAttach("anchor %v is spsc; use _anchor_attach", req.Handle)
	}
	useMux := r.mux != nil && offersMux(req.SupportedTransportKeys)
	if !useMux && !r.tcp.Listening() {
		return framepath.RefuseMPSCAttach("this node serves streams only over %s", mux.WireKey)
	}
	st := r.m.lookup(req.Handle.LocalID())
	if st == nil || st.MPSC() == nil {
		return framepath.RefuseMPSCAttach("mpsc anchor %v not found", req.Handle)
	}
	p, ok := st.MPSC().AddRemote(c.SenderWorkerID())
	if !ok {
		return framepath.RefuseMPSCAttach("mpsc anchor %v not found", req.Handle)
	}
	if useMux {
		return r.attachMPSCMux(st, p, c.SenderWorkerID(), req.LaneKey)
	}
	// The sender, not the body's word, is the producer to signal.
	return r.tcp.BindMPSC(st, p, req.Handle, c.SenderWorkerID(), req.CancelHandle.StreamID())
}

// attachMPSCMux binds producer p of an MPSC anchor for the mux: its
// OpenSlot claims the bind, and its records carry its SenderID at the
// consumer. Stop and cancel reach it as LifecycleSlot and CloseSlot.
func (r *remote) attachMPSCMux(st *inlet.State, p *inlet.Remote, producer ext.WorkerID, key *uint64) ([]byte, error) {
	session := r.ids.next()
	lane, ok := r.mux.BindProducer(st, p, producer, session, r.muxAcceptWindow(), r.lanesTo(producer), key)
	if !ok {
		st.MPSC().EndRemote(p, droppedFrame)
		return framepath.RefuseMPSCAttach("node is shutting down")
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
