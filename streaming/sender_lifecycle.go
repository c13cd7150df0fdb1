package streaming

import (
	"context"
	"sync"
)

// A producer's signals. The three channels of a Sender (and of an
// MPSCSender) mean one thing each, so that a select over them never has
// two ready cases for one event:
//
//   - Stopped closes on a consumer's RequestStop, and on nothing else.
//   - Cancelled closes on a cancel (Controller.Cancel, Anchor.Close, the
//     end of an Anchor.All loop) or on the loss of the consumer (its
//     connection or its node).
//   - Done closes on the first of the two.
//
// A stop followed by a cancel closes all three; a cancel followed by a stop
// closes Cancelled and Done only (a stop of an ended stream is no stop).

// signaller is the producer's side of one path: the same worker
// (localSink, through its anchorState), the per-stream connection
// (remoteSender) or the mux (outSlot).
type signaller interface {
	signalCh(k signalKind) <-chan struct{}
	cause() error // the first signal's cause, nil before
	// watchFire runs fn with the cause at the first signal (under the
	// path's lock: fn must not block), or returns the cause if a signal
	// has fired already.
	watchFire(fn func(error)) error
}

// The three paths implement signaller as part of sink (sink.go).

// senderContext is the context a Sender hands out, made on first use. It
// ends in step with the signal: the path cancels it as it closes Done, so
// a producer whose send failed with ErrCancelled already reads the cause.
type senderContext struct {
	mu     sync.Mutex
	ctx    context.Context
	cancel context.CancelCauseFunc
	closed bool // the Sender ended (Finalize, Detach, Close)
}

// get returns the context, made on the first call: done at the first
// signal (its cause) or at the Sender's end (ErrSenderClosed).
func (c *senderContext) get(sig signaller) context.Context {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.ctx != nil {
		return c.ctx
	}
	c.ctx, c.cancel = context.WithCancelCause(context.Background())
	if why := sig.watchFire(c.cancel); why != nil {
		c.cancel(why)
	} else if c.closed {
		c.cancel(ErrSenderClosed)
	}
	return c.ctx
}

// ended records the Sender's end: its context, if any, ends now, unless a
// signal ended it first.
func (c *senderContext) ended() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.closed = true
	if c.cancel != nil {
		c.cancel(ErrSenderClosed)
	}
}

// Stopped closes when the consumer asks for a graceful stop
// (Controller.RequestStop), and only then. The producer may send its last
// items and Finalize.
func (s *Sender[T]) Stopped() <-chan struct{} { return s.sink.signalCh(sigStop) }

// Cancelled closes when the consumer cancels (Controller.Cancel,
// Anchor.Close, or leaving an Anchor.All loop early) or is lost (its
// connection or node went). Sends then fail with ErrCancelled; nothing
// more is read.
func (s *Sender[T]) Cancelled() <-chan struct{} { return s.sink.signalCh(sigCancel) }

// Done closes on the first of Stopped and Cancelled: the consumer wants no
// more than the producer's last items. Context().Err and context.Cause
// say which.
func (s *Sender[T]) Done() <-chan struct{} { return s.sink.signalCh(sigDone) }

// Context returns a context that is done when the consumer stops, cancels
// or is lost, or when this Sender ends. Its context.Cause is
// ErrStopRequested, ErrCancelled, ErrConsumerLost or ErrSenderClosed, the
// first that happened. Pass it to the work that makes the items, so that
// it ends with the stream. A producer that sends its last items after a
// stop must not send them under this context.
func (s *Sender[T]) Context() context.Context { return s.lc.get(s.sink) }

// Stopped closes when the consumer asks for a graceful stop, and only
// then, as for a Sender. A producer on another worker hears of the stop by
// _stream_stop.
func (s *MPSCSender[T]) Stopped() <-chan struct{} { return s.sink.signalCh(sigStop) }

// Cancelled closes when the consumer cancels the stream, closes its anchor
// or leaves an All loop early, or when this producer's connection or the
// consumer's node is lost. Sends then fail with ErrCancelled.
func (s *MPSCSender[T]) Cancelled() <-chan struct{} { return s.sink.signalCh(sigCancel) }

// Done closes on the first of Stopped and Cancelled.
func (s *MPSCSender[T]) Done() <-chan struct{} { return s.sink.signalCh(sigDone) }

// Context is as Sender.Context: done on a stop, a cancel, a loss or this
// producer's end, with the cause.
func (s *MPSCSender[T]) Context() context.Context { return s.lc.get(s.sink) }
