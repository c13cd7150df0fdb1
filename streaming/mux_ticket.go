package streaming

import (
	"context"
	"fmt"
	"time"

	"github.com/velo-go/velo/ext"
	"github.com/velo-go/velo/internal/msgrx"
	wire "github.com/velo-go/velo/internal/streamwire"
	"github.com/velo-go/velo/metrics"
	"github.com/velo-go/velo/streaming/internal/inlet"
	"github.com/velo-go/velo/streaming/internal/mux"
	"github.com/velo-go/velo/streaming/internal/streamerr"
)

// Zero-RTT stream setup (docs/mux.md, "Zero-RTT setup: tickets").
//
// Every field of an attach answer is the owner's choice, so the owner can
// bind a mux slot before any producer asks: PrebindAnchor does the attach
// handler's work at request registration and returns the answer as a
// ticket. The application puts the ticket in the request it sends to the
// producer anyway; OpenAnchorStream opens the stream from it, and the
// first batch's OpenSlot claims the bind. No _anchor_attach crosses the
// wire.
//
// The pre-bind's rules:
//   - an ordinary attach adopts an unclaimed pre-bind (the producer gets
//     the ticket's session); one that does not offer the mux is refused
//     and the pre-bind is released;
//   - a same-worker attach releases it;
//   - cancelling or closing the anchor releases it; once claimed, the
//     producer is told by CloseSlot;
//   - the accept window (ReservationConfig.AcceptWindow) reaps an
//     unclaimed bind: the consumer sees ErrSenderDropped.

// StreamOpenTicket is what PrebindAnchor mints: send it with the anchor's
// handle to the producer, which passes both to OpenAnchorStream. Treat it
// as opaque: its fields are what the owner bound the stream with
// (transport key, heartbeat interval, routing session, initial credit,
// slot byte budget, lane), and it has AppendJSON, MarshalJSON and
// UnmarshalJSON. It is an alias of the type in the module's internal wire
// codec.
type StreamOpenTicket = wire.StreamOpenTicket

// ErrNoPrebind is returned by PrebindAnchor when it cannot pre-bind: no
// mux on this node, an MPSC anchor, another node's handle, an anchor
// already attached or pre-bound, or one that is gone. The stream can still
// attach the ordinary way.
var ErrNoPrebind = streamerr.ErrNoPrebind

// ErrTicketOnOwner is returned by OpenAnchorStream on the node that minted
// the ticket: a same-worker producer attaches with AttachAnchor.
var ErrTicketOnOwner = streamerr.ErrTicketOnOwner

// PrebindAnchor binds a mux slot for the anchor that handle names and
// returns the ticket that opens it. See ErrNoPrebind for when it cannot.
// Of the options, only WithLaneKey applies: the producer's stream goes on
// the lane the key names.
func (m *Manager) PrebindAnchor(handle AnchorHandle, opts ...SenderOption) (StreamOpenTicket, error) {
	return m.prebindCounted(handle, senderOptions(opts).key)
}

func (m *Manager) prebindCounted(handle wire.AnchorHandle, key *uint64) (StreamOpenTicket, error) {
	start := m.opStart()
	t, err := m.prebind(handle, key)
	m.opDone(metrics.StreamPrebind, metrics.SchemeMux, start, err)
	return t, err
}

func (m *Manager) prebind(handle wire.AnchorHandle, key *uint64) (StreamOpenTicket, error) {
	switch {
	case m.remote == nil || m.remote.mux == nil:
		return StreamOpenTicket{}, fmt.Errorf("%w: this node has no mux", ErrNoPrebind)
	case handle.IsMPSC():
		return StreamOpenTicket{}, fmt.Errorf("%w: %v is an MPSC anchor", ErrNoPrebind, handle)
	case handle.Owner() != m.owner:
		return StreamOpenTicket{}, fmt.Errorf("%w: %v belongs to another node", ErrNoPrebind, handle)
	}
	st := m.lookup(handle.LocalID())
	if st == nil {
		return StreamOpenTicket{}, fmt.Errorf("%w: %v not found", ErrNoPrebind, handle)
	}
	r := m.remote
	session := r.ids.next()
	bd := &mux.Bind{Mx: r.mux, St: st, Credit: r.mux.Cfg.InitialCredit, Prebound: true}
	switch st.ClaimPrebind(bd) {
	case inlet.ClaimEnded:
		return StreamOpenTicket{}, fmt.Errorf("%w: %v has ended", ErrNoPrebind, handle)
	case inlet.ClaimTaken:
		return StreamOpenTicket{}, fmt.Errorf("%w: %v is already attached or pre-bound", ErrNoPrebind, handle)
	}
	if !r.mux.AddBind(mux.BindKey{Anchor: handle.LocalID(), Session: session}, bd, r.muxAcceptWindow(), r.lanesTo(0), key) {
		st.UnclaimPrebind()
		return StreamOpenTicket{}, fmt.Errorf("%w: the node is shutting down", ErrNoPrebind)
	}
	return StreamOpenTicket{
		TransportKey:        mux.WireKey,
		HeartbeatIntervalMS: uint64(r.heartbeat / time.Millisecond),
		RoutingSessionID:    session,
		InitialCredit:       r.mux.Cfg.InitialCredit,
		SlotByteBudget:      uint32(r.mux.Cfg.SlotByteBudget),
		Lane:                uint8(bd.Lane),
	}, nil
}

// OpenAnchorStream opens a stream to the anchor that handle names from the
// ticket its owner minted, with no attach round trip: the stream's first
// batch carries the OpenSlot that claims the owner's bind. A ticket that
// the owner does not know (forged, used already, expired) opens a stream
// that the owner closes at once: the Sender's sends then fail with
// ErrCancelled.
func OpenAnchorStream[T any](ctx context.Context, m *Manager, handle AnchorHandle, ticket StreamOpenTicket, opts ...SenderOption) (*Sender[T], error) {
	encode, err := encoderFor[T](senderCodec(opts))
	if err != nil {
		return nil, err
	}
	switch {
	case handle.Owner() == m.owner:
		return nil, fmt.Errorf("%w: %v", ErrTicketOnOwner, handle)
	case m.remote == nil || m.remote.mux == nil:
		return nil, fmt.Errorf("velo: open %v: this node has no mux", handle)
	case ticket.TransportKey != mux.WireKey:
		return nil, fmt.Errorf("velo: open %v: the ticket is for %q, not %s", handle, ticket.TransportKey, mux.WireKey)
	case handle.IsMPSC():
		return nil, fmt.Errorf("%w: %v names an MPSC anchor", ErrAnchorKind, handle)
	}
	r := m.remote
	if _, err := r.greetOwner(ctx, handle); err != nil {
		return nil, err
	}
	// Queued: the OpenSlot rides the stream's first batch (see OpenQueued).
	s, err := openMuxSlot(ctx, r, handle, ticket.RoutingSessionID, ticket.InitialCredit, ticket.Lane, false, true)
	if err != nil {
		return nil, err
	}
	return &Sender[T]{producer[T]{sink: s, encode: encode}}, nil
}

// greetOwner makes sure the anchor's owner knows this node, so that it
// can send credit back: the first time, a _hello round trip; after that,
// nothing.
func (r *remote) greetOwner(ctx context.Context, handle wire.AnchorHandle) (ext.InstanceID, error) {
	info, err := r.ownerInfo(ctx, handle)
	if err != nil {
		return ext.InstanceID{}, err
	}
	if err := msgrx.Handshake(r.msg, ctx, info.InstanceID); err != nil {
		return ext.InstanceID{}, fmt.Errorf("velo: open %v: %w", handle, err)
	}
	return info.InstanceID, nil
}
