package streaming

import (
	"context"
	"errors"
	"fmt"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/velo-go/velo/ext"
	"github.com/velo-go/velo/internal/msgrx"
	"github.com/velo-go/velo/internal/muxwire"
	wire "github.com/velo-go/velo/internal/streamwire"
	"github.com/velo-go/velo/internal/streamx/hook"
	"github.com/velo-go/velo/messenger"
	"github.com/velo-go/velo/metrics"
	"github.com/velo-go/velo/streaming/internal/inlet"
	"github.com/velo-go/velo/streaming/internal/mux"
)

// Attach negotiation for the mux. A producer with the mux offers messenger-mux-v2 before
// tcp-stream; an owner with the mux answers it only when offered, and the
// per-stream path otherwise, so that older peers and Rust 0.9 nodes (which
// offer messenger-mux-v1, a different wire) meet on tcp-stream.

// muxDisableEnv turns the mux off for a process when set to 1, true, yes
// or on: a rollback that needs no code change. The next attach negotiates
// the per-stream path; a node built WithMuxOnly fails to start.
const muxDisableEnv = "VELO_MESSENGER_MUX_DISABLE"

// WithMux sets the messenger mux of a node Manager (on by default).
func WithMux(c MuxConfig) ManagerOption {
	return ManagerOption{func(nc *nodeConfig) { nc.mux = c }}
}

// WithMuxOnly builds a node with no per-stream listener: every stream
// between nodes, SPSC or MPSC, rides the mux. Attaches that do not offer
// the mux are refused. It fails the build when the mux is disabled.
func WithMuxOnly() ManagerOption {
	return ManagerOption{func(nc *nodeConfig) { nc.muxOnly = true }}
}

var errMuxOnlyDisabled = errors.New("velo: a mux-only node needs the mux: it is disabled (MuxConfig.Disabled or " + muxDisableEnv + ")")

// muxDisabledByEnv reads muxDisableEnv.
func muxDisabledByEnv() bool {
	switch strings.ToLower(strings.TrimSpace(os.Getenv(muxDisableEnv))) {
	case "1", "true", "yes", "on":
		return true
	}
	return false
}

// startMux builds the mux of r and registers its batch handlers, one per
// lane, inline on the reader goroutine: ingress never blocks.
func (r *remote) startMux(cfg MuxConfig, met *metrics.VeloMetrics) error {
	if cfg.Disabled || muxDisabledByEnv() {
		return nil
	}
	mx := mux.New(cfg.internal(), r.heartbeat, r.postBatch)
	mx.ProbePost = r.probeBatch
	mx.PostTagged = r.postBatchTagged
	mx.PostOwned = r.postBatchOwned
	mx.PostOwnedNoWait = r.postBatchOwnedNoWait
	mx.StagesAbove = msgrx.StagingThreshold(r.msg)
	mx.Routable = func(peer ext.WorkerID) bool {
		_, ok := msgrx.InstanceOf(r.msg, peer)
		return ok
	}
	mx.OpsMet = r.m.met
	mx.AbandonCall = func(token uint64, err error) bool { return msgrx.AbandonToken(r.msg, token, err) }
	mx.Log = r.log
	if met != nil {
		mx.Met = met.Mux()
		mx.Unreport = mx.Met.Report(mx.Snapshot)
	}
	for lane := range muxwire.Lanes {
		h := messenger.FireHandler(muxwire.HandlerName(lane), func(c *messenger.Context) {
			mx.HandleBatch(c.SenderWorkerID(), lane, c.Payload)
		}, messenger.WithInline(), messenger.WithDrainExempt(),
			msgrx.WithStagedFailure(func(sender ext.WorkerID, h map[string]string, err error) {
				mx.StagedFailure(sender, lane, h[mux.SlotHeader], err)
			}))
		if err := msgrx.RegisterSystem(r.msg, h); err != nil {
			mx.Close()
			return err
		}
	}
	r.mux = mx
	return nil
}

// postBatch hands one batch to the messenger for peer. It never waits:
// a congested peer parks the batch in the transport's admission gate.
//
// When the lane's send channel is full, the batch waits in the transport's
// admission gate, and so does the batcher: it parks until the batch is
// admitted, so that its producers wait on their full slots (the book's
// flush "parked on transport admission"). A batch the gate refuses after
// all is an error like a refusal at once: epoch death.
func (r *remote) postBatch(peer ext.WorkerID, lane int, batch []byte) error {
	return r.postBatchTagged(peer, lane, batch, "")
}

// postBatchTagged is postBatch with the _mux_slot header of a singleton.
func (r *remote) postBatchTagged(peer ext.WorkerID, lane int, batch []byte, tag string) error {
	inst, ok := msgrx.InstanceOf(r.msg, peer)
	if !ok {
		return fmt.Errorf("%w: worker %v", messenger.ErrPeerNotRegistered, peer)
	}
	var opts []messenger.CallOption
	if tag != "" {
		opts = append(opts, messenger.WithHeaders(map[string]string{mux.SlotHeader: tag}))
	}
	return admitted(msgrx.PostLaneOutcome(r.msg, inst, lane, muxwire.HandlerName(lane), batch, opts...))
}

// admitted waits until a posted batch is admitted (a congested peer parks
// it in the transport's admission gate) and returns the post's error or
// the admission's.
func admitted(out ext.SendOutcome, err error) error {
	if err != nil {
		return err
	}
	if adm := out.Admission(); adm != nil {
		<-adm.Done()
		return adm.Err()
	}
	return nil
}

// postBatchOwned is postBatch for a batch in a pooled buffer: the
// messenger sends it without a copy, and the transport holds owner while
// it holds the bytes.
func (r *remote) postBatchOwned(peer ext.WorkerID, lane int, batch []byte, owner ext.Owner) error {
	inst, ok := msgrx.InstanceOf(r.msg, peer)
	if !ok {
		return fmt.Errorf("%w: worker %v", messenger.ErrPeerNotRegistered, peer)
	}
	return admitted(msgrx.PostLaneOwned(r.msg, inst, lane, muxwire.HandlerName(lane), batch, owner))
}

// postBatchOwnedNoWait is postBatchOwned that returns a batch's pending
// admission instead of waiting for it: FlushBatch, which writes on its
// caller's goroutine, never blocks.
func (r *remote) postBatchOwnedNoWait(peer ext.WorkerID, lane int, batch []byte, owner ext.Owner) (*ext.Admission, error) {
	inst, ok := msgrx.InstanceOf(r.msg, peer)
	if !ok {
		return nil, fmt.Errorf("%w: worker %v", messenger.ErrPeerNotRegistered, peer)
	}
	out, err := msgrx.PostLaneOwned(r.msg, inst, lane, muxwire.HandlerName(lane), batch, owner)
	if err != nil {
		return nil, err
	}
	return out.Admission(), nil
}

// offersMux says whether an attach request names this build's mux.
func offersMux(keys []string) bool { return slices.Contains(keys, mux.WireKey) }

// attachMux binds st for the mux: the producer's OpenSlot claims it within
// the accept window. The caller checked st and holds no lock.
func (r *remote) attachMux(st *inlet.State, producer ext.WorkerID, key *uint64) ([]byte, error) {
	pre, why := st.ClaimMux(func(pre inlet.Prebind) bool { return r.mux.Adopt(pre.(*mux.Bind), producer) })
	switch {
	case why == inlet.ClaimEnded:
		return refuseAttach("anchor %v not found", st.Handle())
	case why == inlet.ClaimTaken:
		return refuseAttach("anchor %v already attached", st.Handle())
	case pre != nil:
		bd := pre.(*mux.Bind) // the inlet holds only the mux's pre-binds
		return r.muxAnswer(bd.Key.Session, bd.Lane), nil
	}
	session := r.ids.next()
	lane, ok := r.mux.Bind(st, producer, session, r.muxAcceptWindow(), r.lanesTo(producer), key)
	if !ok {
		st.UnclaimMux()
		return refuseAttach("node is shutting down")
	}
	return r.muxAnswer(session, lane), nil
}

// muxAnswer is the attach answer for a mux bind under session on lane.
func (r *remote) muxAnswer(session uint64, lane int) []byte {
	resp := wire.AttachResponse{
		TransportKey:        mux.WireKey,
		HeartbeatIntervalMS: uint64(r.heartbeat / time.Millisecond),
		RoutingSessionID:    session,
		InitialCredit:       r.mux.Cfg.InitialCredit,
		SlotByteBudget:      uint32(r.mux.Cfg.SlotByteBudget),
		Lane:                uint8(lane),
	}
	return resp.AppendJSON(make([]byte, 0, 192))
}

// muxAcceptWindow is how long a mux bind waits for its OpenSlot: the
// reservation config's accept window (180 s by default).
func (r *remote) muxAcceptWindow() time.Duration {
	if r.acceptWindow != AcceptWindow { // shortened for a test
		return r.acceptWindow
	}
	return r.m.res.AcceptWindow
}

// openMuxSender opens the slot of a stream the owner bound for the mux.
func openMuxSender[T any](ctx context.Context, r *remote, handle wire.AnchorHandle, resp wire.AttachResponse, encode func(T) ([]byte, error)) (*Sender[T], error) {
	s, err := openMuxSlot(ctx, r, handle, resp.RoutingSessionID, resp.InitialCredit, resp.Lane, true, false)
	if err != nil {
		return nil, err
	}
	return &Sender[T]{producer[T]{sink: s, encode: encode}}, nil
}

// openMuxSlot opens this node's slot for a stream the owner bound as
// (handle, routing) with a window of credit. mine says the owner bound it
// for this node alone (an SPSC attach's answer): when this node's mux
// closed or its batcher stopped before the slot could open, the owner is
// told the stream is over (abandonBound), or its consumer would wait out
// the accept window. A ticket's pre-bind may still be claimed by another
// producer, and an MPSC producer is released by its own message. queued
// returns once the OpenSlot is queued for the batcher (Batcher.OpenQueued).
func openMuxSlot(ctx context.Context, r *remote, handle wire.AnchorHandle, routing uint64, credit uint32, lane uint8, mine, queued bool) (*mux.OutSlot, error) {
	if credit == 0 {
		// No shipped owner answers this; a fallback would reach nothing.
		return nil, fmt.Errorf("velo: attach %v: the owner answered the mux with no credit window", handle)
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	peer, ln := handle.Owner(), r.senderLane(handle.Owner(), lane)
	b, s, err := r.mux.OpenOn(peer, ln, func(b *mux.Batcher) (*mux.OutSlot, error) {
		if queued {
			return b.OpenQueued(handle.LocalID(), routing, credit)
		}
		return b.Open(handle.LocalID(), routing, credit)
	})
	if err != nil {
		if mine && errors.Is(err, ErrCancelled) { // the mux closed, or its batchers stopped
			r.mux.AbandonBound(peer, ln, handle.LocalID(), routing)
		}
		if b == nil {
			return nil, fmt.Errorf("velo: attach %v: %w", handle, messenger.ErrShuttingDown)
		}
		return nil, fmt.Errorf("velo: attach %v: open slot: %w", handle, err)
	}
	s.Handle = handle
	return s, nil
}

// FlushBatch asks every mux batcher of this node to write what producers
// staged. Under FlushManual it is the write; under FlushAuto it forces
// one. It never blocks and never fails; with no mux it does nothing.
func (m *Manager) FlushBatch() {
	if m.remote != nil && m.remote.mux != nil {
		m.remote.mux.FlushAll()
	}
}

// offeredKeys are the transports this node's producers offer, the mux
// first. The list is shared once the node is built: read it, never write.
func (r *remote) offeredKeys() []string {
	if r.offered != nil {
		return r.offered
	}
	if r.mux != nil {
		return []string{mux.WireKey, r.streamKey}
	}
	return []string{r.streamKey}
}

// muxCounts is a snapshot of the mux's counts, read by package streamx.
type muxCounts = hook.MuxStats

// muxStats returns the mux's counts; zero with no mux.
func (m *Manager) muxStats() muxCounts {
	if m.remote == nil || m.remote.mux == nil {
		return muxCounts{}
	}
	mx := m.remote.mux
	out, in := mx.LiveSlots()
	return muxCounts{
		BatchesSent: mx.N.BatchesSent.Load(), RecordsSent: mx.N.RecordsSent.Load(),
		BatchesReceived: mx.N.BatchesRecv.Load(), RecordsReceived: mx.N.RecordsRecv.Load(),
		LiveSlotsOut: out, LiveSlotsIn: in,
		CreditExhausted: mx.N.CreditExhausted.Load(), EpochDeaths: mx.N.EpochDeaths.Load(),
		ProtocolErrors: mx.N.ProtocolErrors.Load(), WatchdogFirings: mx.N.WatchdogFirings.Load(),
		BatcherWakes: mx.N.BatcherWakes.Load(),
	}
}

// probeBatch posts a health-check batch without waiting for admission: a
// refusal now is what it looks for, and a congested peer must not hold the
// sweeper that every peer shares.
func (r *remote) probeBatch(peer ext.WorkerID, lane int, batch []byte) error {
	inst, ok := msgrx.InstanceOf(r.msg, peer)
	if !ok {
		return fmt.Errorf("%w: worker %v", messenger.ErrPeerNotRegistered, peer)
	}
	_, err := msgrx.PostLaneOutcome(r.msg, inst, lane, muxwire.HandlerName(lane), batch)
	return err
}

// senderLane is the lane a producer uses for a stream the owner placed on
// lane: that lane modulo the lanes its own transport keeps to the owner.
func (r *remote) senderLane(owner ext.WorkerID, lane uint8) int {
	inst, ok := msgrx.InstanceOf(r.msg, owner)
	if !ok {
		return 0
	}
	return int(lane) % mux.ClampLanes(msgrx.Lanes(r.msg, inst))
}

// lanesTo is how many lanes the mux uses to peer (0: to any peer, for a
// pre-bind).
func (r *remote) lanesTo(peer ext.WorkerID) int {
	if peer == 0 {
		return mux.ClampLanes(msgrx.Lanes(r.msg, ext.InstanceID{}))
	}
	inst, ok := msgrx.InstanceOf(r.msg, peer)
	if !ok {
		return 1
	}
	return mux.ClampLanes(msgrx.Lanes(r.msg, inst))
}
