package streaming

import (
	"context"
	"fmt"
	"sync/atomic"
	"unsafe"

	wire "github.com/velo-go/velo/internal/streamwire"
	"github.com/velo-go/velo/metrics"
)

// RetireOutcome says what became of a stream's output on the producer's
// node once the Sender finalized, detached or closed.
type RetireOutcome uint8

const (
	// RetireSent: the terminal (and so every record before it) was handed
	// on. On the same worker: it is in the anchor's inlet. A cancel
	// through a Controller while the anchor is open still gives Sent.
	RetireSent RetireOutcome = iota + 1
	// RetireDiscarded: the output was thrown away before it was handed
	// on. On the same worker: the consumer had closed its anchor.
	RetireDiscarded
)

func (o RetireOutcome) String() string {
	switch o {
	case RetireSent:
		return "Sent"
	case RetireDiscarded:
		return "Discarded"
	}
	return fmt.Sprintf("RetireOutcome(%d)", uint8(o))
}

// senderCore is the part of a same-worker producer (its localSink) that
// the inlet reads. Its fields are guarded by st.mu.
type senderCore struct {
	st   *anchorState
	done bool // finalized, detached or closed
	// pump marks the reader of a per-stream connection pushing for a
	// remote producer: its waits are the reader pump's backpressure, not
	// a Send's.
	pump bool
	retirement
}

// retirement is the outcome of a sender's output and the one channel its
// waiters share. Its owner guards it with a lock of its own.
//
// A stream that nobody watches never makes the channel, and a watcher that
// comes after the end gets an already-closed channel: the common cases cost no
// allocation and no channel operation beyond the close.
type retirement struct {
	outcome atomic.Uint32 // a RetireOutcome, 0 until known; read without the lock
	done    chan struct{} // made by the first watcher before the end
}

// known returns the outcome, 0 until the sender has ended. It takes no lock.
func (r *retirement) known() RetireOutcome { return RetireOutcome(r.outcome.Load()) }

// closedChs are the Retired channels of senders whose outcome is known.
// Even a closed channel is received from under its lock, so one shared
// channel would bounce between cores when many streams retire at once;
// closedFor spreads the senders over several.
var closedChs = func() (cs [16]chan struct{}) {
	for i := range cs {
		cs[i] = make(chan struct{})
		close(cs[i])
	}
	return cs
}()

// closedFor picks a closed channel for the retirement at r by its address.
func closedFor(r *retirement) chan struct{} {
	return closedChs[(uintptr(unsafe.Pointer(r))>>6)%uintptr(len(closedChs))]
}

// watchLocked returns the channel that closes once the outcome is known.
// The caller holds the owner's lock.
func (r *retirement) watchLocked() <-chan struct{} {
	if r.known() != 0 {
		return closedFor(r)
	}
	if r.done == nil {
		r.done = make(chan struct{})
	}
	return r.done
}

// settleLocked records out and closes the waiters' channel, if any. The
// caller holds the owner's lock; closing under it is fine (a close never
// blocks), and it keeps the outcome visible before any waiter wakes. The
// first outcome stands: a stream the peer ended and whose producer then
// finalizes stays as the end settled it.
func (r *retirement) settleLocked(out RetireOutcome) {
	if r.known() != 0 {
		return
	}
	r.outcome.Store(uint32(out))
	if r.done != nil {
		close(r.done)
	}
}

// Sender is a producer's end of a stream, from AttachAnchor. It ends with
// exactly one of Finalize, Detach or Close; a producer that stops early
// must still call Close (defer sender.Close()), or the consumer waits.
// Its methods are safe to call from many goroutines.
//
// Its methods other than Finalize, SendFrame, NegotiatedTransport and
// Ready are shared with MPSCSender: the two are one implementation.
type Sender[T any] struct {
	producer[T]
}

// NegotiatedTransport is the transport key the anchor's owner answered the
// attach with ("messenger-mux-v2" over the mux, "tcp-stream" on the
// per-stream path), or "" on the same worker, where no transport is
// involved.
func (s *Sender[T]) NegotiatedTransport() string { return s.sink.transport() }

// SendFrame puts a finished Item frame in the stream, such as the result
// of ByteItemBuilder.Finish, with no copy. The stream owns frame
// after the call: do not change it. It waits as Send does.
func (s *Sender[T]) SendFrame(ctx context.Context, frame []byte) error {
	f, err := wire.DecodeFrame(frame)
	if err != nil {
		return err
	}
	if f.Kind != wire.KindItem {
		return fmt.Errorf("velo: SendFrame takes an Item frame, not %v", f.Kind)
	}
	return s.sink.push(ctx, frame)
}

// Finalize ends the stream normally: the consumer reads io.EOF after every
// item before it. It never waits, even when the inlet is full. It returns
// ErrCancelled if the consumer had closed its anchor (the output is
// discarded) and ErrSenderClosed if the Sender had already ended.
func (s *Sender[T]) Finalize() error {
	return s.endCounted(metrics.StreamFinalize, finalizedFrame, false)
}
