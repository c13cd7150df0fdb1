package streaming

import (
	"context"
	"errors"

	wire "github.com/velo-go/velo/internal/streamwire"
	"github.com/velo-go/velo/metrics"
	"github.com/velo-go/velo/streaming/internal/inlet"
)

// producer is what a Sender and an MPSCSender share: every method of a
// producer's end of a stream except those only one kind has (Finalize and
// the rest for an SPSC stream, SenderID for an MPSC producer). It holds
// the path to the anchor (a sink: same worker, per-stream TCP or mux), the
// item encoder and the Context, so the two public types cannot diverge.
type producer[T any] struct {
	sink   sink // the path to the anchor: same worker, per-stream TCP or mux
	encode func(T) ([]byte, error)
	lc     senderContext
	first  firstToken // the span of its first item, with WithTraceEvents (tracing.go)
}

// Handle names the anchor this producer is attached to.
func (s *producer[T]) Handle() AnchorHandle { return s.sink.AnchorHandle() }

// Send puts one item in the stream. It waits while the anchor's inlet is
// full, until there is room, ctx is done, or the consumer cancels
// (ErrCancelled). It also returns ErrCancelled once the consumer's stream
// has ended on its side (an item that did not decode), and ErrSenderClosed
// after the producer ended.
func (s *producer[T]) Send(ctx context.Context, item T) error {
	f, err := s.encode(item)
	if err != nil {
		return err
	}
	return s.pushed(s.sink.Push(ctx, f))
}

// SendBytes puts one byte item in the stream: payload as a MessagePack
// binary, the same frame that Send writes for a []byte item. It copies
// payload once, into the frame (over the mux, straight into the slot's
// arena); the caller keeps payload. It waits as Send does.
func (s *producer[T]) SendBytes(ctx context.Context, payload []byte) error {
	return s.pushed(s.sink.PushBytes(ctx, payload))
}

// pushed records a first item that went (firstToken) and returns err.
func (s *producer[T]) pushed(err error) error {
	if err == nil && s.first.span.Load() != nil {
		s.first.sent(s.sink.AnchorHandle())
	}
	return err
}

// SendError puts a soft error in the stream and the stream goes on: the
// consumer's Next returns a *SenderError with msg (an MPSC consumer reads
// an MPSCSenderError frame). It waits as Send does.
func (s *producer[T]) SendError(ctx context.Context, msg string) error {
	return s.sink.Push(ctx, wire.AppendErrorFrame(nil, wire.KindSenderError, msg))
}

// Detach ends this producer without ending the stream. For an SPSC stream
// the consumer goes on waiting, and another producer may attach to the
// same handle at once; for an MPSC stream the consumer reads an
// MPSCDetached frame after this producer's items. It never waits. It
// returns ErrCancelled if the consumer had closed its anchor (the output
// is discarded) and ErrSenderClosed if the producer had already ended.
func (s *producer[T]) Detach() error {
	return s.endCounted(metrics.StreamDetach, detachedFrame, true)
}

// Close ends this producer without finalizing or detaching: an SPSC
// consumer reads ErrSenderDropped after every item before it, an MPSC
// consumer an MPSCDropped frame and the stream goes on. After Finalize or
// Detach it does nothing and returns nil, so it can be deferred. It never
// waits.
func (s *producer[T]) Close() error {
	err := s.end(droppedFrame, false)
	if errors.Is(err, ErrSenderClosed) {
		return nil
	}
	return err
}

// Retired returns a channel that closes once the producer has ended
// (finalized, detached or closed); Outcome then says what became of its
// output: RetireSent when its last frame entered the anchor's inlet (on
// this worker) or was written (on another), RetireDiscarded when the
// consumer had closed its anchor or the connection ended first. Any
// number of waiters may take it, before or after the end.
func (s *producer[T]) Retired() <-chan struct{} { return s.sink.RetiredCh() }

// Outcome is the RetireOutcome of the producer's output once Retired has
// closed, and 0 before.
func (s *producer[T]) Outcome() RetireOutcome { return s.sink.Known() }

// Stopped closes when the consumer asks for a graceful stop
// (Controller.RequestStop), and only then. The producer may send its last
// items and end. A producer on another worker hears of it by _stream_stop.
func (s *producer[T]) Stopped() <-chan struct{} { return s.sink.SignalCh(inlet.SigStop) }

// Cancelled closes when the consumer cancels (Controller.Cancel,
// Anchor.Close, or leaving an Anchor.All loop early) or is lost (its
// connection or node went). Sends then fail with ErrCancelled; nothing
// more is read.
func (s *producer[T]) Cancelled() <-chan struct{} { return s.sink.SignalCh(inlet.SigCancel) }

// Done closes on the first of Stopped and Cancelled: the consumer wants no
// more than the producer's last items. Context().Err and context.Cause
// say which.
func (s *producer[T]) Done() <-chan struct{} { return s.sink.SignalCh(inlet.SigDone) }

// Context returns a context that is done when the consumer stops, cancels
// or is lost, or when this producer ends. Its context.Cause is
// ErrStopRequested, ErrCancelled, ErrConsumerLost or ErrSenderClosed, the
// first that happened. Pass it to the work that makes the items, so that
// it ends with the stream. A producer that sends its last items after a
// stop must not send them under this context.
func (s *producer[T]) Context() context.Context { return s.lc.get(s.sink) }

// endCounted ends the producer as end does, and counts op.
func (s *producer[T]) endCounted(op metrics.StreamOp, frame []byte, detach bool) error {
	met, sc := s.sink.OpsMetrics()
	start := opStart(met)
	err := s.end(frame, detach)
	opDone(met, op, sc, start, err)
	return err
}

// end ends the producer with its terminal frame.
func (s *producer[T]) end(frame []byte, detach bool) error {
	defer s.lc.ended() // its Context ends with ErrSenderClosed, unless a signal came first
	return s.sink.Finish(frame, detach)
}
