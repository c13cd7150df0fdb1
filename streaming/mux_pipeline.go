package streaming

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/velo-go/velo/ext"
	"github.com/velo-go/velo/internal/msgerr"
	"github.com/velo-go/velo/internal/msgrx"
	wire "github.com/velo-go/velo/internal/streamwire"
	"github.com/velo-go/velo/streaming/internal/mux"
	"github.com/velo-go/velo/streaming/internal/streamerr"
)

// A pipelined attach: AttachAnchor over the mux without waiting for the
// owner's answer.
//
// An engine admits a request, attaches to its anchor and starts
// generating. Waiting for the _anchor_attach round trip stalls its loop
// once per request, and the wakes of that round trip cost more CPU than
// the stream's tokens. The owner chooses every field of its answer
// itself, and an owner instance that answered with the mux once answers
// every later attach of this node with the mux (its mux is fixed for its
// life). So the producer opens its slot at once, sends the request, and
// holds the slot's records until the answer names the routing session and
// the credit window; the OpenSlot then goes out with the first records,
// in one batch. The wire does not change: the request, the answer and the
// OpenSlot are those of an ordinary attach, in the same order.
//
// A refusal (anchor not found, already attached) comes back later: Send
// returns it, and Finalize and Detach wait for the answer so that they
// return it too. The first attach to an owner instance always waits, to
// learn what it answers; so does an attach to an owner reached over more
// than one lane, since the owner picks the lane. Under FlushManual every
// attach waits: the application decides when bytes move, and an OpenSlot
// written whenever the owner's answer lands, alone or with a flush that
// happens to be in progress, would make the writes depend on timing.

// ErrAttachTimeout is what a pipelined attach that got no answer within
// 30 s reports, from Send, Finalize, Detach and Ready.
var ErrAttachTimeout = streamerr.ErrAttachTimeout

// canPipeline says whether an attach to owner may skip the wait.
func (r *remote) canPipeline(owner ext.InstanceID) bool {
	if r.mux == nil || r.mux.Cfg.WaitForAttach || r.mux.Cfg.Flush == mux.FlushManual {
		return false
	}
	if _, ok := r.muxOwners.Load(owner); !ok {
		return false
	}
	return r.lanesTo(owner.WorkerID()) == 1
}

// attachBodies are the buffers pipelined attaches encode their requests
// in: the messenger copies a request's body into its frame before
// UnaryAsync returns (callers may reuse it), so a body need not be an
// allocation of every stream's.
var attachBodies = sync.Pool{New: func() any { b := make([]byte, 0, 256); return &b }}

// attachPipelined opens a pending slot for handle, sends the attach
// request, and returns the Sender without waiting for the answer.
func attachPipelined[T any](ctx context.Context, r *remote, owner ext.InstanceID, handle wire.AnchorHandle, encode func(T) ([]byte, error), key *uint64) (*Sender[T], error) {
	b, s, err := r.mux.OpenOn(handle.Owner(), 0, func(b *mux.Batcher) (*mux.OutSlot, error) { return b.OpenPending(handle) })
	if b == nil {
		return nil, fmt.Errorf("velo: attach %v: %w", handle, err)
	}
	if err != nil {
		return nil, fmt.Errorf("velo: attach %v: open slot: %w", handle, err)
	}
	session := r.ids.next()
	req := r.attachRequest(handle, session, key)
	// The answer outlives the call: ctx bounds AttachAnchor, not the
	// stream, and callers commonly cancel it as AttachAnchor returns. The
	// call has no deadline of its own; expirePending bounds the wait.
	start := r.m.opStart()
	body := attachBodies.Get().(*[]byte)
	*body = req.AppendJSON((*body)[:0])
	call, err := msgrx.UnaryAsyncCall(r.msg, context.Background(), owner, wire.AnchorAttachHandler, *body, func(body []byte, err error) {
		if err != nil {
			msgerr.NameOp(err, "stream attach")
		}
		r.answerPending(s, owner, start, body, err)
	})
	attachBodies.Put(body) // the messenger copied the body into its frame
	if err != nil {
		err = fmt.Errorf("velo: attach %v: %w", handle, err)
		b.FailPending(s, err)
		return nil, err
	}
	b.SetCall(s, call.Token())
	return &Sender[T]{producer[T]{sink: s, encode: encode}}, nil
}

// answerPending applies the owner's answer to a pending slot. It runs on
// the messenger's reader goroutine, so it never waits.
func (r *remote) answerPending(s *mux.OutSlot, owner ext.InstanceID, start time.Time, body []byte, err error) {
	var resp wire.AttachResponse
	if err == nil {
		resp, err = wire.DecodeAttachResponse(body)
	}
	refusal := ""
	if err == nil {
		refusal = refusalOf(resp.Refused, resp.Reason)
	}
	r.countAttachRTT(start, err == nil && refusal == "", resp.TransportKey)
	handle := s.Handle
	switch {
	case err != nil:
		err = fmt.Errorf("velo: attach %v: %w", handle, err)
	case refusal != "":
		err = attachRefusal(handle, refusal)
	case resp.TransportKey != mux.WireKey:
		// Not expected of an owner that answered the mux before; the
		// next attach to it waits again.
		r.muxOwners.Delete(owner)
		err = fmt.Errorf("velo: attach %v: the owner answered transport %q where it had answered %s", handle, resp.TransportKey, mux.WireKey)
	case resp.InitialCredit == 0:
		err = fmt.Errorf("velo: attach %v: the owner answered the mux with no credit window", handle)
	case r.senderLane(handle.Owner(), resp.Lane) != s.B.Lane:
		err = fmt.Errorf("velo: attach %v: the owner answered lane %d, which this node does not use", handle, resp.Lane)
	}
	if err != nil {
		s.B.FailPending(s, err)
		return
	}
	s.B.ResolvePending(s, resp.RoutingSessionID, resp.InitialCredit)
}

// Ready waits until the anchor's owner has answered this Sender's attach
// and returns its refusal, if any (errors.Is matches ErrAnchorNotFound and
// ErrAlreadyAttached as AttachAnchor's error does). It returns at once for
// a Sender whose attach already waited: on the same worker, on the
// per-stream path, from a ticket, or with MuxConfig.WaitForAttach. Call it
// where the answer decides what to do next, such as a loop that attaches
// until a detached stream is free again; a producer that just streams does
// not need it, since Send and Finalize report a refusal too.
func (s *Sender[T]) Ready(ctx context.Context) error { return s.sink.Ready(ctx) }
