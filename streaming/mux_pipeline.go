package streaming

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/velo-go/velo/ext"
	"github.com/velo-go/velo/internal/msgerr"
	"github.com/velo-go/velo/internal/msgrx"
	"github.com/velo-go/velo/internal/muxwire"
	wire "github.com/velo-go/velo/internal/streamwire"
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

// attachAnswerTimeout bounds the wait for the answer: a live owner
// answers at once, and a lost one fails the call sooner through the
// messenger. The credit walk enforces it (expirePending), so an attach
// arms no timer and watches no context: those cost more than the rest of
// the attach's own work.
var attachAnswerTimeout = 30 * time.Second // a var: tests shorten it

// ErrAttachTimeout is what a pipelined attach that got no answer within
// 30 s reports, from Send, Finalize, Detach and Ready.
var ErrAttachTimeout = streamerr.ErrAttachTimeout

// canPipeline says whether an attach to owner may skip the wait.
func (r *remote) canPipeline(owner ext.InstanceID) bool {
	if r.mux == nil || r.mux.cfg.WaitForAttach || r.mux.cfg.Flush == FlushManual {
		return false
	}
	if _, ok := r.muxOwners.Load(owner); !ok {
		return false
	}
	return r.lanesTo(owner.WorkerID()) == 1
}

// attachPipelined opens a pending slot for handle, sends the attach
// request, and returns the Sender without waiting for the answer.
func attachPipelined[T any](ctx context.Context, r *remote, owner ext.InstanceID, handle wire.AnchorHandle, encode func(T) ([]byte, error), key *uint64) (*Sender[T], error) {
	b, s, err := r.mux.openOn(handle.Owner(), 0, func(b *batcher) (*outSlot, error) { return b.openPending(handle) })
	if b == nil {
		return nil, fmt.Errorf("velo: attach %v: %w", handle, err)
	}
	if err != nil {
		return nil, fmt.Errorf("velo: attach %v: open slot: %w", handle, err)
	}
	session := r.ids.next()
	req := wire.AttachRequest{
		Handle:                 handle,
		SessionID:              session,
		CancelHandle:           wire.NewCancelHandle(r.msg.WorkerID(), session),
		SupportedTransportKeys: r.offeredKeys(),
		LaneKey:                key,
	}
	// The answer outlives the call: ctx bounds AttachAnchor, not the
	// stream, and callers commonly cancel it as AttachAnchor returns. The
	// call has no deadline of its own; expirePending bounds the wait.
	start := r.m.opStart()
	call, err := msgrx.UnaryAsyncCall(r.msg, context.Background(), owner, wire.AnchorAttachHandler, req.AppendJSON(make([]byte, 0, 256)), func(body []byte, err error) {
		if err != nil {
			msgerr.NameOp(err, "stream attach")
		}
		r.answerPending(s, owner, start, body, err)
	})
	if err != nil {
		err = fmt.Errorf("velo: attach %v: %w", handle, err)
		b.failPending(s, err)
		return nil, err
	}
	b.setCall(s, call)
	return &Sender[T]{producer[T]{sink: s, encode: encode}}, nil
}

// openOn opens a slot with open on the lane's current batcher. When
// eviction or peer loss took that batcher out as it was picked (open
// answers ErrCancelled), it tries once more on the lane's new one. b is
// nil when the mux is closed.
func (mx *mux) openOn(peer ext.WorkerID, lane int, open func(*batcher) (*outSlot, error)) (b *batcher, s *outSlot, err error) {
	if b, err = mx.batcherFor(peer, lane); err != nil {
		return nil, nil, err
	}
	s, err = open(b)
	if errors.Is(err, ErrCancelled) {
		if b2, err2 := mx.batcherFor(peer, lane); err2 == nil && b2 != b {
			b = b2
			s, err = open(b)
		}
	}
	return b, s, err
}

// setCall records the attach request of a pending slot, for expirePending.
func (b *batcher) setCall(s *outSlot, call msgrx.AsyncCall) {
	b.mu.Lock()
	if s.pending {
		s.call = call
	}
	b.mu.Unlock()
}

// answerPending applies the owner's answer to a pending slot. It runs on
// the messenger's reader goroutine, so it never waits.
func (r *remote) answerPending(s *outSlot, owner ext.InstanceID, start time.Time, body []byte, err error) {
	var resp wire.AttachResponse
	if err == nil {
		resp, err = wire.DecodeAttachResponse(body)
	}
	refusal := ""
	if err == nil {
		refusal = refusalOf(resp.Refused, resp.Reason)
	}
	r.countAttachRTT(start, err == nil && refusal == "", resp.TransportKey)
	handle := s.handle
	switch {
	case err != nil:
		err = fmt.Errorf("velo: attach %v: %w", handle, err)
	case refusal != "":
		err = attachRefusal(handle, refusal)
	case resp.TransportKey != muxWireKey:
		// Not expected of an owner that answered the mux before; the
		// next attach to it waits again.
		r.muxOwners.Delete(owner)
		err = fmt.Errorf("velo: attach %v: the owner answered transport %q where it had answered %s", handle, resp.TransportKey, muxWireKey)
	case resp.InitialCredit == 0:
		err = fmt.Errorf("velo: attach %v: the owner answered the mux with no credit window", handle)
	case r.senderLane(handle.Owner(), resp.Lane) != s.b.lane:
		err = fmt.Errorf("velo: attach %v: the owner answered lane %d, which this node does not use", handle, resp.Lane)
	}
	if err != nil {
		s.b.failPending(s, err)
		return
	}
	s.b.resolvePending(s, resp.RoutingSessionID, resp.InitialCredit)
}

// openPending allocates a slot for a pipelined attach to handle: it holds
// its records until resolvePending or failPending.
func (b *batcher) openPending(handle wire.AnchorHandle) (*outSlot, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if !b.state.mayWrite() {
		return nil, ErrCancelled
	}
	idx, ok := b.allocLocked()
	if !ok {
		return nil, errSlotsExhausted
	}
	id, _ := muxwire.NewSlotID(idx, b.gens[idx])
	s := &outSlot{b: b, id: id, handle: handle, anchorID: handle.LocalID(), pending: true, answered: make(chan struct{}),
		q: b.queueLocked()}
	b.slots[idx] = s
	b.live++
	b.pendingN++
	s.pendingWalk = b.mx.walks.Load()
	b.lastUse = time.Now()
	s.openSeq = s.seq
	s.seq++
	return s, nil
}

// resolvePending opens a pending slot under the owner's answer: its
// OpenSlot is queued for the next batch, ahead of the records it held.
func (b *batcher) resolvePending(s *outSlot, session uint64, credit uint32) {
	b.mu.Lock()
	if !s.pending {
		b.mu.Unlock()
		return
	}
	s.pending = false
	b.pendingN--
	close(s.answered)
	if s.life.closed() || b.state.saidGoodbye() || !b.state.mayWrite() {
		// The stream ended before the answer came (the Sender dropped, an
		// epoch death, the Manager closing after its goodbye). The owner
		// bound its anchor for this attach: tell it the stream is over.
		// Queued for the lane's writer: this is the messenger's reader,
		// which must not wait for a flush that waits for the transport.
		s.endLocked(ErrConsumerLost)
		s.session = session
		w := b.queueJobLocked(laneJob{kind: jobOpenGone, slot: s}, false)
		b.mu.Unlock()
		b.writeQueued(w)
		return
	}
	s.session, s.credit, s.window = session, credit, credit
	b.opens = append(b.opens, s)
	s.readyLocked()
	b.mu.Unlock()
	b.signal()
}

// openGone writes, for a pipelined attach whose stream ended before the
// owner's answer, its OpenSlot and CloseSlot{PeerGone} in one batch: the
// owner's consumer sees ErrSenderDropped now, instead of when its stream
// watchdog gives up on a slot that never opened. When the slot's index
// already serves a stream the owner may know (an OpenSlot for it would
// collide there), or eviction or peer loss stopped the batcher, the lane's
// current batcher writes it with an index of its own. The caller owns
// the lane's writes.
func (b *batcher) writeOpenGone(s *outSlot) {
	b.mu.Lock()
	now := b.slots[s.id.Index()]
	b.mu.Unlock()
	wrote := (now == nil || now.pending) && b.postOpenGone(s.id, s.openSeq, s.anchorID, s.session)
	if !wrote {
		b.mx.abandonBound(b.peer, b.lane, s.anchorID, s.session)
	}
}

// abandonBound tells the owner that the stream it bound for this node as
// (anchorID, session) will not open. An index taken for the moment
// carries the OpenSlot and the CloseSlot{PeerGone}; with every index
// taken, or the batcher stopped, nothing is written and the owner's
// accept window ends the bind. It is queued for the lane's writer, and
// written by the caller when the lane is free.
func (b *batcher) abandonBound(anchorID, session uint64) {
	b.queueJob(laneJob{kind: jobAbandon, anchorID: anchorID, session: session}, true)
}

// writeAbandon is abandonBound's write. The caller owns the lane's writes.
func (b *batcher) writeAbandon(anchorID, session uint64) {
	b.mu.Lock()
	idx, ok := b.allocLocked()
	var id muxwire.SlotID
	if ok {
		id, _ = muxwire.NewSlotID(idx, b.gens[idx])
	}
	b.mu.Unlock()
	if !ok {
		return
	}
	b.postOpenGone(id, 0, anchorID, session)
	b.mu.Lock()
	b.gens[idx]++
	b.free = append(b.free, idx)
	b.mu.Unlock()
}

// abandonBound is the batcher's abandonBound on the lane's current
// batcher, or once this mux is closed on its retired one.
func (mx *mux) abandonBound(peer ext.WorkerID, lane int, anchorID, session uint64) {
	b, err := mx.batcherFor(peer, lane)
	if err != nil { // closed
		b = mx.retiredFor(peer, lane)
	}
	b.abandonBound(anchorID, session)
}

// retiredFor returns the batcher that writes to peer on lane once this
// mux is closed: the one close retired, or for a lane that had none a new
// one, made retired here. One writer per lane keeps the late batches in
// order: two batches with epochs of their own could arrive in the wrong
// order, and the peer would drop the older as stale. A new one's
// goroutine ends at once, since the mux is stopping.
func (mx *mux) retiredFor(peer ext.WorkerID, lane int) *batcher {
	k := laneKey{peer, lane}
	mx.mu.Lock()
	defer mx.mu.Unlock()
	b := mx.retired[k]
	if b == nil {
		b = newBatcher(mx, peer, lane)
		b.mu.Lock() // a batcher's lock nests in the mux's
		b.state.to(batcherRetired)
		b.state.to(batcherClosing)
		b.mu.Unlock()
		mx.retired[k] = b
	}
	return b
}

// postOpenGone writes OpenSlot and CloseSlot{PeerGone} for id in one
// batch: the owner claims its bind and ends it with Dropped. It reports
// false when the batcher may no longer write (a transport's refusal
// counts as written: the peer is gone). The caller owns the lane's writes.
func (b *batcher) postOpenGone(id muxwire.SlotID, seq uint32, anchorID, session uint64) bool {
	err := b.postRecords(2, muxwire.OpenSlotBodyLen, func(enc *muxwire.Encoder, i int) {
		if i == 0 {
			enc.OpenSlot(id, seq, anchorID, session)
		} else {
			enc.CloseSlot(id, 0, muxwire.PeerGone)
		}
	})
	return !errors.Is(err, errNoLongerWrites)
}

// failPending ends a pending slot with err: its records are discarded,
// and its sends, Finalize and Detach return err.
func (b *batcher) failPending(s *outSlot, err error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if !s.pending {
		return
	}
	s.pending = false
	b.pendingN--
	close(s.answered)
	if !s.life.closed() {
		s.failErr = err
		s.endLocked(ErrCancelled)
	}
}

// expirePending fails the pipelined attaches that have waited longer than
// attachAnswerTimeout, counted in credit walks (tick is this walk's). Each
// one's request is abandoned too, so that an owner that never answers does
// not keep a response slot of the messenger per attach.
func (mx *mux) expirePending(tick uint64) {
	limit := uint64(max(1, attachAnswerTimeout/mx.cfg.CreditSweepInterval))
	type lateAttach struct {
		s    *outSlot
		call msgrx.AsyncCall
	}
	var late []lateAttach // allocated only when an attach is late: the idle walk allocates nothing
	mx.mu.Lock()
	for _, b := range mx.batchers {
		b.mu.Lock() // a batcher's lock nests in the mux's
		if b.pendingN > 0 {
			for _, s := range b.slots {
				if s != nil && s.pending && tick-s.pendingWalk > limit {
					late = append(late, lateAttach{s, s.call})
				}
			}
		}
		b.mu.Unlock()
	}
	mx.mu.Unlock()
	for _, l := range late {
		// Abandon runs the answer's callback with the error, which fails
		// the slot; failPending covers a request that could not be named.
		if !l.call.Abandon(fmt.Errorf("%w within %v", ErrAttachTimeout, attachAnswerTimeout)) {
			l.s.b.failPending(l.s, fmt.Errorf("%w to %v within %v", ErrAttachTimeout, l.s.handle, attachAnswerTimeout))
		}
	}
}

// Ready waits until the anchor's owner has answered this Sender's attach
// and returns its refusal, if any (errors.Is matches ErrAnchorNotFound and
// ErrAlreadyAttached as AttachAnchor's error does). It returns at once for
// a Sender whose attach already waited: on the same worker, on the
// per-stream path, from a ticket, or with MuxConfig.WaitForAttach. Call it
// where the answer decides what to do next, such as a loop that attaches
// until a detached stream is free again; a producer that just streams does
// not need it, since Send and Finalize report a refusal too.
func (s *Sender[T]) Ready(ctx context.Context) error { return s.sink.ready(ctx) }
