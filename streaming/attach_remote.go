package streaming

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/velo-go/velo/ext"
	"github.com/velo-go/velo/internal/msgerr"
	"github.com/velo-go/velo/internal/msgrx"
	wire "github.com/velo-go/velo/internal/streamwire"
	"github.com/velo-go/velo/messenger"
	"github.com/velo-go/velo/metrics"
	"github.com/velo-go/velo/streaming/internal/framepath"
	"github.com/velo-go/velo/streaming/internal/mux"
)

// The producer's attach to an anchor of another worker: the round trip
// to the owner, then the stream on the transport the owner answered, a
// slot of the mux or a connection of the per-stream path.

// attachRemote makes the _anchor_attach round trip to the handle's owner,
// dials its per-stream listener and starts the stream's pump.
func attachRemote[T any](ctx context.Context, r *remote, handle wire.AnchorHandle, encode func(T) ([]byte, error), key *uint64) (*Sender[T], error) {
	info, err := r.reachOwner(ctx, handle)
	if err != nil {
		return nil, err
	}
	owner := info.InstanceID
	if r.canPipeline(owner) {
		// The mux answered this owner before: its per-stream address
		// is not needed, so it is not parsed for every stream.
		return attachPipelined(ctx, r, owner, handle, encode, key)
	}
	addr, err := r.streamAddr(handle, info)
	if err != nil {
		return nil, err
	}
	// Registered before the request leaves: the owner may send a stop or
	// a cancel (one made before this attach) before its answer arrives.
	rs := r.newStream(handle)
	s, err := bindRemote(ctx, r, rs, owner, addr, encode, key)
	if err != nil {
		r.tcp.Unregister(rs)
	}
	return s, err
}

// bindRemote makes the _anchor_attach round trip for rs, dials the
// owner's listener and starts the pump.
func bindRemote[T any](ctx context.Context, r *remote, rs *framepath.Stream, owner ext.InstanceID, addr []byte, encode func(T) ([]byte, error), key *uint64) (*Sender[T], error) {
	handle := rs.AnchorHandle()
	var resp wire.AttachResponse
	err := r.askAttach(ctx, owner, wire.AnchorAttachHandler, handle, rs.ID(), key, func(body []byte) (string, string, error) {
		var err error
		resp, err = wire.DecodeAttachResponse(body)
		return resp.TransportKey, refusalOf(resp.Refused, resp.Reason), err
	})
	if err != nil {
		return nil, err
	}
	if r.testAnswered != nil {
		r.testAnswered()
	}
	if resp.TransportKey == mux.WireKey && r.mux != nil {
		r.tcp.Unregister(rs) // the mux signals its slot; the registry is for the per-stream path
		r.muxOwners.Store(owner, struct{}{})
		return openMuxSender(ctx, r, handle, resp, encode)
	}
	if err := r.tcp.Open(ctx, rs, addr, resp.TransportKey, resp.RoutingSessionID, resp.HeartbeatIntervalMS); err != nil {
		return nil, err
	}
	return &Sender[T]{producer[T]{sink: rs, encode: encode}}, nil
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
	// sends at the attach finds it.
	rs := r.newStream(handle)
	ok := false
	defer func() {
		if !ok {
			r.tcp.Unregister(rs)
		}
	}()
	var resp wire.MPSCAttachResponse
	err = r.askAttach(ctx, owner, wire.MPSCAnchorAttachHandler, handle, rs.ID(), key, func(body []byte) (string, string, error) {
		var err error
		resp, err = wire.DecodeMPSCAttachResponse(body)
		return resp.TransportKey, refusalOf(resp.Refused, resp.Reason), err
	})
	if err != nil {
		return nil, err
	}
	if resp.TransportKey == mux.WireKey && r.mux != nil {
		// The registry (left by the deferred func) is for the
		// per-stream path: the mux signals its slot.
		return openMuxMPSCSender(ctx, r, owner, handle, resp, encode)
	}
	err = r.tcp.Open(ctx, rs, addr, resp.TransportKey, resp.RoutingSessionID, resp.HeartbeatIntervalMS)
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
	s, err := openMuxSlot(ctx, r, handle, resp.RoutingSessionID, resp.InitialCredit, resp.Lane, false, false)
	if err != nil {
		r.releaseMPSC(owner, handle, resp.SenderID)
		return nil, err
	}
	return &MPSCSender[T]{producer: producer[T]{sink: s, encode: encode}, id: SenderID(resp.SenderID)}, nil
}

// newStream makes the producer's end of a per-stream connection to
// handle's anchor, the sink of its Sender, and registers it, so that a
// stop or a cancel the owner sends before its answer finds it.
func (r *remote) newStream(handle wire.AnchorHandle) *framepath.Stream {
	rs := r.tcp.NewStream(handle, r.ids.next())
	r.tcp.Register(rs)
	return rs
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

// reachOwner finds the instance that owns handle and makes sure the owner
// knows this node.
func (r *remote) reachOwner(ctx context.Context, handle wire.AnchorHandle) (ext.PeerInfo, error) {
	info, err := r.ownerInfo(ctx, handle)
	if err != nil {
		return ext.PeerInfo{}, err
	}
	// The owner answers through its peer table: the _hello exchange puts
	// this node there (a system handler's call does not greet on its own).
	// A draining owner refuses _hello and may know this node already.
	if err := msgrx.Handshake(r.msg, ctx, info.InstanceID); err != nil && !errors.Is(err, messenger.ErrShuttingDown) {
		return ext.PeerInfo{}, fmt.Errorf("velo: attach %v: %w", handle, err)
	}
	return info, nil
}

// ownerInfo is the PeerInfo of the anchor's owner: from the peer table, or
// through discovery for an owner this node has not met (the handle came in
// a request from a third node).
func (r *remote) ownerInfo(ctx context.Context, handle wire.AnchorHandle) (ext.PeerInfo, error) {
	owner := handle.Owner()
	if info, ok := msgrx.PeerInfoOf(r.msg, owner); ok {
		return info, nil
	}
	if _, err := msgrx.ResolveWorker(r.msg, ctx, owner); err != nil {
		return ext.PeerInfo{}, fmt.Errorf("velo: owner of anchor %v: %w", handle, err)
	}
	info, ok := msgrx.PeerInfoOf(r.msg, owner)
	if !ok {
		return ext.PeerInfo{}, fmt.Errorf("%w: worker %v, owner of anchor %v", messenger.ErrPeerNotRegistered, owner, handle)
	}
	return info, nil
}

// streamAddr is the address entry of the per-stream listener that owner
// info advertises under this node's frame transport's key. With the mux
// on, an owner without a listener is fine: the entry is then nil, and the
// attach must negotiate the mux.
func (r *remote) streamAddr(handle wire.AnchorHandle, info ext.PeerInfo) ([]byte, error) {
	entry, err := info.Address.Lookup(ext.TransportKey(r.streamKey))
	switch {
	case err == nil:
		return entry, nil
	case r.mux != nil:
		return nil, nil
	}
	// A mux-only owner, or one whose frame transport is another.
	return nil, fmt.Errorf("velo: attach %v: the owner advertises no usable per-stream listener under %q: %w", handle, r.streamKey, err)
}

// attachRequest is the _anchor_attach body for handle under session id:
// this node's cancel handle, the transports it offers, the lane key.
func (r *remote) attachRequest(handle wire.AnchorHandle, id uint64, key *uint64) wire.AttachRequest {
	return wire.AttachRequest{
		Handle:                 handle,
		SessionID:              id,
		CancelHandle:           wire.NewCancelHandle(r.msg.WorkerID(), id),
		SupportedTransportKeys: r.offeredKeys(),
		LaneKey:                key,
	}
}

// askAttach sends an attach request for the stream id of this node (the
// producer's session and cancel handle, the transports it offers, the lane
// key) to owner's handler, decodes the answer with decode (the transport
// key, and the owner's reason when it refused), and counts the round trip.
// A refusal comes back as the error that the same-worker attach gives.
func (r *remote) askAttach(ctx context.Context, owner ext.InstanceID, handler string, handle wire.AnchorHandle, id uint64, key *uint64, decode func([]byte) (transport, refusal string, err error)) error {
	req := r.attachRequest(handle, id, key)
	rttStart := r.m.opStart()
	body, err := r.msg.Unary(ctx, owner, handler, req.AppendJSON(make([]byte, 0, 256)))
	if err != nil {
		msgerr.NameOp(err, "stream attach") // the remote messenger's refusal
	}
	var transport, refusal string
	if err == nil {
		transport, refusal, err = decode(body)
	}
	r.countAttachRTT(rttStart, err == nil && refusal == "", transport)
	switch {
	case err != nil:
		return fmt.Errorf("velo: attach %v: %w", handle, err)
	case refusal != "":
		return attachRefusal(handle, refusal)
	}
	return nil
}

// countAttachRTT records the sender's view of the round trip: success only
// for an answer that bound the stream, under the key it names.
func (r *remote) countAttachRTT(start time.Time, ok bool, key string) {
	met := r.m.met
	if met == nil {
		return
	}
	sc := metrics.SchemeUnknown
	switch {
	case !ok:
	case key == r.tcp.Key():
		sc = r.tcp.Scheme()
	default:
		sc = metrics.SchemeOf(key) // the mux; never a label the peer chose
	}
	met.AttachRTT(sc, ok, time.Since(start))
}

// attachRefusal turns the owner's reason into the error the same-worker
// attach returns for it, so that errors.Is works on both paths.
func attachRefusal(handle wire.AnchorHandle, reason string) error {
	switch {
	case strings.Contains(reason, "already attached"):
		return fmt.Errorf("%w: %v (owner: %s)", ErrAlreadyAttached, handle, reason)
	case strings.Contains(reason, "not found"):
		return fmt.Errorf("%w: %v (owner: %s)", ErrAnchorNotFound, handle, reason)
	}
	return fmt.Errorf("velo: attach %v refused: %s", handle, reason)
}

// refusalOf is the reason of a refused answer, "" for one that bound.
func refusalOf(refused bool, reason string) string {
	if !refused {
		return ""
	}
	if reason == "" {
		return "refused" // never empty: "" means bound
	}
	return reason
}
