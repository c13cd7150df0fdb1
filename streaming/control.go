package streaming

import (
	"context"
	"errors"
	"fmt"

	"github.com/velo-go/velo/ext"
	"github.com/velo-go/velo/internal/msgerr"
	"github.com/velo-go/velo/internal/msgrx"
	wire "github.com/velo-go/velo/internal/streamwire"
	"github.com/velo-go/velo/messenger"
	"github.com/velo-go/velo/streaming/internal/framepath"
)

// The node's control handlers: those of the per-stream path, which
// framepath describes (stop, cancel, detach, finalize, MPSC detach and
// cancel; control.rs of the reference), and the renewal of reservations,
// which serves anchors whatever path their producers take.

// unitAnswer is the answer of a handler that returns nothing.
var unitAnswer = framepath.UnitAnswer

// registerControl registers the control handlers of both ends, and hears
// of lost peers.
func (r *remote) registerControl() error {
	hs := []messenger.Handler{
		// Drain-exempt: it serves reservations that were already made.
		messenger.UnaryHandler(anchorRenewHandler, r.onAnchorRenew, messenger.WithDrainExempt()),
	}
	for _, h := range r.tcp.Handlers() {
		hs = append(hs, messengerHandler(h))
	}
	for _, h := range hs {
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

// messengerHandler is h as the messenger registers it: the worker that
// the messenger stamped the request with, and its payload.
func messengerHandler(h framepath.Handler) messenger.Handler {
	var opts []messenger.HandlerOption
	if h.DrainExempt {
		opts = append(opts, messenger.WithDrainExempt())
	}
	if fire := h.Fire; fire != nil {
		return messenger.FireHandler(h.Name, func(c *messenger.Context) { fire(c.SenderWorkerID(), c.Payload) }, opts...)
	}
	unary := h.Unary
	return messenger.UnaryHandler(h.Name, func(c *messenger.Context) ([]byte, error) {
		return unary(c.SenderWorkerID(), c.Payload)
	}, opts...)
}

// activeSenders counts this node's remote senders that a stop or cancel
// can still reach: attaching or streaming on the per-stream path.
func (m *Manager) activeSenders() int {
	if m.remote == nil {
		return 0
	}
	return m.remote.tcp.ActiveStreams()
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
