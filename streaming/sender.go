package streaming

import (
	"context"
	"fmt"

	wire "github.com/velo-go/velo/internal/streamwire"
	"github.com/velo-go/velo/metrics"
	"github.com/velo-go/velo/streaming/internal/retire"
)

// RetireOutcome says what became of a stream's output on the producer's
// node once the Sender finalized, detached or closed.
type RetireOutcome = retire.Outcome

const (
	// RetireSent: the terminal (and so every record before it) was handed
	// on. On the same worker: it is in the anchor's inlet. A cancel
	// through a Controller while the anchor is open still gives Sent.
	RetireSent RetireOutcome = retire.Sent
	// RetireDiscarded: the output was thrown away before it was handed
	// on. On the same worker: the consumer had closed its anchor.
	RetireDiscarded RetireOutcome = retire.Discarded
)

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
func (s *Sender[T]) NegotiatedTransport() string { return s.sink.Transport() }

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
	return s.pushed(s.sink.Push(ctx, frame))
}

// Finalize ends the stream normally: the consumer reads io.EOF after every
// item before it. It never waits, even when the inlet is full. It returns
// ErrCancelled if the consumer had closed its anchor (the output is
// discarded) and ErrSenderClosed if the Sender had already ended.
func (s *Sender[T]) Finalize() error {
	return s.endCounted(metrics.StreamFinalize, finalizedFrame, false)
}
