package streaming

import (
	"context"
	"errors"
	"fmt"
	"iter"

	wire "github.com/velo-go/velo/internal/streamwire"
	"github.com/velo-go/velo/metrics"
	"github.com/velo-go/velo/streaming/internal/inlet"
)

// Many producers, one consumer: MPSC anchors.
//
// An MPSC anchor is an inlet.State, in the same registry and under the same
// mutex as an SPSC one: its handle has wire.MPSCBit set, and its registry
// key carries the bit too, so an SPSC lookup never finds it. Each frame in
// the inlet is tagged with its producer's SenderID in a ring of ids kept in
// step with the ring of frames. Nothing here owns a goroutine.

// SenderID names one producer of an MPSC anchor. The anchor gives ids from
// 1 up, one per attach, and never gives the same id twice: a producer that
// detaches and attaches again gets a new one.
type SenderID = inlet.SenderID

// MPSCKind says what an MPSCFrame carries.
type MPSCKind uint8

const (
	// MPSCItem: Item holds an item of the producer.
	MPSCItem MPSCKind = iota + 1
	// MPSCSenderError: the producer sent a soft error; Err is a
	// *SenderError.
	MPSCSenderError
	// MPSCDetached: the producer detached. It sends nothing more.
	MPSCDetached
	// MPSCDropped: the producer closed its sender without detaching. It
	// sends nothing more. Err is nil (reserved for a transport error of a
	// remote producer, a *TransportError).
	MPSCDropped
	// MPSCBadItem: an item of the producer did not decode as T; Err is a
	// *ItemError. The stream goes on (the reference keeps the anchor
	// alive and names the sender).
	MPSCBadItem
)

func (k MPSCKind) String() string {
	switch k {
	case MPSCItem:
		return "Item"
	case MPSCSenderError:
		return "SenderError"
	case MPSCDetached:
		return "Detached"
	case MPSCDropped:
		return "Dropped"
	case MPSCBadItem:
		return "BadItem"
	}
	return fmt.Sprintf("MPSCKind(%d)", uint8(k))
}

// MPSCFrame is one thing that an MPSC anchor delivers, tagged with the
// producer that sent it. None of them ends the stream: Detached and Dropped
// end one producer only.
type MPSCFrame[T any] struct {
	Sender SenderID
	Kind   MPSCKind
	Item   T     // set for MPSCItem
	Err    error // set for MPSCSenderError and MPSCBadItem; see MPSCDropped
}

// MPSCAnchor is the consumer's end of a stream with many producers. Make
// one with CreateMPSCAnchor, give its Handle to the producers (each calls
// AttachMPSCAnchor), read with Next or All, and Close it when done. Only
// the consumer ends the stream: Close, a Controller's Cancel, or the
// unattached timeout if one was set.
//
// Next and All are meant for one consumer goroutine; Close and the
// Controller may be used from any goroutine.
type MPSCAnchor[T any] struct {
	a      inlet.MPSC
	decode func([]byte) (T, error)
	trace  uint8 // anchorUntraced unless WithTraceEvents (tracing.go)
}

// CreateMPSCAnchor makes an anchor for items of type T that accepts many
// producers at once, and registers it with m. Its inlet holds
// defaultCapacity frames from all producers together unless WithCapacity
// says otherwise. It has no unattached timeout unless
// WithUnattachedTimeout sets one (the Manager's ReservationConfig applies
// to SPSC anchors only): the timeout then runs while no producer is
// attached, from creation and again each time the last producer leaves,
// and ends the stream with ErrUnattachedTimeout. RenewReservations does
// not extend it.
func CreateMPSCAnchor[T any](m *Manager, opts ...AnchorOption) (*MPSCAnchor[T], error) {
	start := m.opStart()
	an, err := createMPSCAnchor[T](m, opts)
	m.opDone(metrics.StreamCreate, metrics.SchemeLocal, start, err)
	if err == nil && m.met != nil {
		m.met.AnchorCreated(true)
	}
	return an, err
}

func createMPSCAnchor[T any](m *Manager, opts []AnchorOption) (*MPSCAnchor[T], error) {
	cfg, err := anchorOptions(opts, Forever)
	if err != nil {
		return nil, err
	}
	decode, err := decoderFor[T](cfg.codec)
	if err != nil {
		return nil, err
	}
	an := &MPSCAnchor[T]{decode: decode}
	if m.traced {
		an.trace = anchorTraceWaiting
	}
	an.a.Init(&m.home, cfg.capacity, cfg.unattached)
	st := an.a.State()
	if !m.register(st, true) {
		return nil, ErrManagerClosed
	}
	st.Arm() // nothing for Forever
	return an, nil
}

// Handle names the anchor to producers; its IsMPSC reports true.
func (an *MPSCAnchor[T]) Handle() AnchorHandle { return an.a.State().Handle() }

// Senders counts the producers attached now.
func (an *MPSCAnchor[T]) Senders() int {
	return an.a.Producers()
}

// Next returns the next frame of any producer: an item, a soft error, an
// item that did not decode, or the departure of one producer (Detached or
// Dropped). The frames of one producer come in the order it sent them.
// Next waits until a frame arrives, the stream ends, or ctx is done. An
// error ends the stream — ErrCancelled after Close or a Controller's
// Cancel, ErrUnattachedTimeout — and Next then returns it again; ctx's
// error does not end the stream.
//
// For T = []byte the item aliases its frame, which the consumer owns.
func (an *MPSCAnchor[T]) Next(ctx context.Context) (MPSCFrame[T], error) {
	id, f, bad, err := an.a.Pop(ctx)
	if err != nil {
		return MPSCFrame[T]{}, err
	}
	out := MPSCFrame[T]{Sender: id}
	if bad != nil {
		out.Kind, out.Err = MPSCBadItem, bad
		return out, nil
	}
	switch f.Kind {
	case wire.KindItem:
		v, err := an.decode(f.Item)
		if err != nil {
			out.Kind, out.Err = MPSCBadItem, err
		} else {
			out.Kind, out.Item = MPSCItem, v
			if an.trace == anchorTraceWaiting {
				an.received(ctx)
			}
		}
	case wire.KindSenderError:
		out.Kind, out.Err = MPSCSenderError, &SenderError{Message: f.Message}
	case wire.KindDetached, wire.KindFinalized:
		// A producer cannot finalize an MPSC anchor: the reference reads
		// a Finalized frame as Detached.
		out.Kind = MPSCDetached
	case wire.KindDropped:
		out.Kind = MPSCDropped
	case wire.KindTransportError:
		out.Kind, out.Err = MPSCDropped, &TransportError{Message: f.Message}
	}
	return out, nil
}

// All ranges over the stream: each frame with a nil error, until the stream
// ends or ctx is done; that error is yielded once as the last pair.
// Leaving the loop early or ctx ending cancels the stream for every
// producer, as Controller.Cancel does.
func (an *MPSCAnchor[T]) All(ctx context.Context) iter.Seq2[MPSCFrame[T], error] {
	return func(yield func(MPSCFrame[T], error) bool) {
		for {
			f, err := an.Next(ctx)
			if err != nil && isCtxEnd(ctx, err) {
				an.a.State().Cancel(false)
				yield(f, err)
				return
			}
			if !yield(f, err) {
				if err == nil {
					an.a.State().Cancel(false)
				}
				return
			}
			if err != nil {
				return
			}
		}
	}
}

// Controller returns the handle that stops or cancels this stream from any
// goroutine. RequestStop closes the Stopped channel of every producer,
// attached now or later; Cancel ends the stream for all of them.
func (an *MPSCAnchor[T]) Controller() Controller { return Controller{st: an.a.State()} }

// Close cancels the stream if it has not ended, and removes the anchor from
// its Manager: every producer's Cancelled channel closes, its sends fail
// with ErrCancelled, and its later Detach or Close is discarded
// (RetireDiscarded). Close is idempotent and returns nil.
func (an *MPSCAnchor[T]) Close() error {
	an.a.State().Cancel(true)
	return nil
}

// MPSCSender is one producer's end of an MPSC stream, from
// AttachMPSCAnchor. It ends with Detach or Close; it cannot finalize the
// stream, which only the consumer ends. A producer that stops early must
// still call Close (defer sender.Close()). Its methods are safe to call
// from many goroutines.
type MPSCSender[T any] struct {
	producer[T]
	id SenderID
}

// AttachMPSCAnchor attaches a producer to the MPSC anchor that handle names
// and returns its MPSCSender, with a SenderID of its own. T is as in
// AttachAnchor. It waits while the anchor's inlet is full, until there is
// room or ctx is done: so producers that attach and leave against a
// consumer that does not read cannot grow the inlet (each attached producer
// adds at most one frame past the capacity, its Detached or Dropped).
//
// It returns ErrAnchorKind for an SPSC handle and ErrAnchorNotFound for an
// anchor that is unknown, closed or ended. A stop or cancel that the
// consumer made before the attach is already fired on the returned sender.
//
// A handle of another worker needs a Manager from NewNodeManager: the
// attach then makes the _mpsc_anchor_attach round trip to the owner, which
// gives the SenderID; the producer then rides the messenger mux as a slot
// of its own, or opens one TCP connection when the owner has no mux. It
// does not wait for room in the inlet; the sends do.
func AttachMPSCAnchor[T any](ctx context.Context, m *Manager, handle AnchorHandle, opts ...SenderOption) (*MPSCSender[T], error) {
	cfg := senderOptions(opts)
	return attachMPSCCounted[T](ctx, m, handle, cfg.key, cfg.codec)
}

func attachMPSCCounted[T any](ctx context.Context, m *Manager, handle wire.AnchorHandle, key *uint64, codec Codec) (*MPSCSender[T], error) {
	start := m.opStart()
	s, err := attachMPSCAnchor[T](ctx, m, handle, key, codec)
	if m.traced {
		var first *firstToken
		var tr string
		if s != nil {
			first, tr = &s.first, s.sink.Transport()
		}
		m.traceAttach(ctx, "mpsc", handle, first, tr, err)
	}
	if handle.Owner() == m.owner { // a remote attach is counted by its owner, as in AttachAnchor
		m.opDone(metrics.StreamAttach, metrics.SchemeLocal, start, err)
	}
	return s, err
}

func attachMPSCAnchor[T any](ctx context.Context, m *Manager, handle wire.AnchorHandle, key *uint64, codec Codec) (*MPSCSender[T], error) {
	encode, err := encoderFor[T](codec)
	if err != nil {
		return nil, err
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	if !handle.IsMPSC() {
		return nil, fmt.Errorf("%w: %v names an SPSC anchor; use AttachAnchor", ErrAnchorKind, handle)
	}
	if handle.Owner() != m.owner {
		if m.remote == nil {
			return nil, fmt.Errorf("%w: %v", ErrRemoteAttach, handle)
		}
		return attachMPSCRemote(ctx, m.remote, handle, encode, key)
	}
	st := m.lookup(handle.LocalID())
	if st == nil || st.MPSC() == nil {
		return nil, fmt.Errorf("%w: %v", ErrAnchorNotFound, handle)
	}
	id, err := st.MPSC().AttachLocal(ctx)
	if errors.Is(err, ErrAnchorNotFound) {
		// Ended or closed between the lookup and the lock.
		return nil, fmt.Errorf("%w: %v", ErrAnchorNotFound, handle)
	}
	if err != nil {
		return nil, err
	}
	return newLocalMPSCSender(st, id, encode), nil
}

// SenderID is this producer's id within the anchor: the Sender of each of
// its frames at the consumer.
func (s *MPSCSender[T]) SenderID() SenderID { return s.id }
