package streaming

import (
	"context"
	"errors"
	"io"
	"iter"

	wire "github.com/velo-go/velo/internal/streamwire"
	"github.com/velo-go/velo/streaming/internal/inlet"
)

// Anchor is the consumer's end of a stream of items of type T. Make one
// with CreateAnchor, give its Handle to a producer, read with Next,
// NextBytes or All, and Close it when done.
//
// Next, NextBytes and All are meant for one consumer goroutine; Close and
// the Controller may be used from any goroutine.
type Anchor[T any] struct {
	st     inlet.State
	decode func([]byte) (T, error)
	trace  uint8 // anchorUntraced unless WithTraceEvents (tracing.go)
}

// Handle names the anchor to a producer. It is the only credential a
// producer needs: send it only to the producer that needs it.
func (a *Anchor[T]) Handle() AnchorHandle { return a.st.Handle() }

// Next returns the next item. It waits until an item arrives, the stream
// ends, or ctx is done. A *SenderError is a soft error and the stream goes
// on. The stream ends with io.EOF (the producer finalized),
// ErrSenderDropped, a *TransportError, an *ItemError or ErrCancelled;
// Next then returns that error again.
//
// For T = []byte the item aliases its frame, which the consumer owns.
func (a *Anchor[T]) Next(ctx context.Context) (T, error) {
	var zero T
	f, err := a.st.Pop(ctx)
	if err != nil {
		return zero, err
	}
	if f.Kind == wire.KindSenderError {
		return zero, &SenderError{Message: f.Message}
	}
	v, err := a.decode(f.Item)
	if err != nil {
		a.st.End(err)
		return zero, err
	}
	if a.trace == anchorTraceWaiting {
		a.received(ctx)
	}
	return v, nil
}

// NextBytes returns the payload of the next byte item (a MessagePack
// binary, what SendBytes and a []byte Send write), aliasing its frame with
// no copy. Everything other than an item behaves as in Next. An item that
// is not a binary ends the stream with an *ItemError.
func (a *Anchor[T]) NextBytes(ctx context.Context) ([]byte, error) {
	return nextBytes(ctx, &a.st, &a.trace)
}

// nextBytes is NextBytes, out of the generic method so that the method is
// a call the compiler inlines into each instantiation: a consumer parked
// for its next frame has one library frame on its stack, this one, which
// makes the wait itself (inlet.State.PopBytesOrWait says why).
func nextBytes(ctx context.Context, st *inlet.State, trace *uint8) ([]byte, error) {
	p, w, done, fast, err := st.PopBytesOrWait(ctx)
	for w != nil {
		if done == nil {
			<-w
		} else {
			inlet.SelectWait(w, done)
		}
		p, w, done, fast, err = st.PopBytesAfterWait(ctx, fast)
	}
	if err != nil {
		if errors.Is(err, inlet.ErrFinalized) {
			err = st.ForgetFinalized()
		}
		return nil, err
	}
	if *trace == anchorTraceWaiting {
		receivedFirst(ctx, trace, st.Handle)
	}
	return p, nil
}

// All ranges over the stream: each item with a nil error, each soft error
// (*SenderError) with a zero item. It stops after a finalized stream
// without yielding io.EOF; any other end, ctx's included, is yielded once
// as the last pair.
//
// Leaving the loop early (break, return) or ctx ending cancels the stream,
// as Controller.Cancel does: the producer's Cancelled and Done channels
// close and its Context ends with ErrCancelled, on this node or another,
// and its sends fail. A consumer that wants the producer to finish
// gracefully calls Controller.RequestStop and reads on instead.
func (a *Anchor[T]) All(ctx context.Context) iter.Seq2[T, error] {
	return func(yield func(T, error) bool) {
		for {
			v, err := a.Next(ctx)
			if errors.Is(err, io.EOF) {
				return
			}
			if err != nil && isCtxEnd(ctx, err) {
				a.st.Cancel(false) // before the yield: the producer hears at once
				yield(v, err)
				return
			}
			var se *SenderError
			live := err == nil || errors.As(err, &se) // the stream goes on after this pair
			if !yield(v, err) {
				if live {
					a.st.Cancel(false)
				}
				return
			}
			if !live {
				return
			}
		}
	}
}

// isCtxEnd says err is ctx's own end, not the stream's.
func isCtxEnd(ctx context.Context, err error) bool {
	cerr := ctx.Err()
	return cerr != nil && err == cerr
}

// Controller returns the handle that stops or cancels this stream from
// any goroutine.
func (a *Anchor[T]) Controller() Controller { return Controller{st: &a.st} }

// Close cancels the stream if it has not ended, and removes the anchor
// from its Manager. A producer's later Finalize, Detach or Close is then
// discarded (RetireDiscarded). Close is idempotent and returns nil.
func (a *Anchor[T]) Close() error {
	a.st.Cancel(true)
	return nil
}

// Controller stops or cancels a stream from outside its consumer. Its zero
// value does nothing.
type Controller struct {
	st *inlet.State
}

// RequestStop asks the producer to finish: its Sender.Stopped and Done
// channels close, its Context ends with ErrStopRequested, and the producer
// may send its final output and Finalize. Nothing buffered is discarded. A
// stop made before a producer attaches is kept. It is idempotent, and does
// nothing after a cancel.
func (c Controller) RequestStop() {
	if c.st != nil {
		c.st.RequestStop()
	}
}

// Cancel ends the stream at once: Next returns ErrCancelled, the
// producer's Cancelled and Done channels close (Stopped does not), its
// Context ends with ErrCancelled, and its sends fail with ErrCancelled. A cancel made before a producer attaches is kept: the
// producer sees it on attach. It is idempotent.
func (c Controller) Cancel() {
	if c.st != nil {
		c.st.Cancel(false)
	}
}
