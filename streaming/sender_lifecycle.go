package streaming

import (
	"context"
	"sync"

	"github.com/velo-go/velo/streaming/internal/inlet"
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
// (localSink, through its inlet.State), the per-stream connection
// (framepath.Stream) or the mux (mux.OutSlot).
type signaller interface {
	SignalCh(k inlet.SignalKind) <-chan struct{}
	Cause() error // the first signal's cause, nil before
	// WatchFire runs fn with the cause at the first signal (under the
	// path's lock: fn must not block), or returns the cause if a signal
	// has fired already.
	WatchFire(fn func(error)) error
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
	if why := sig.WatchFire(c.cancel); why != nil {
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
