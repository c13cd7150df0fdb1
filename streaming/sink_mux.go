package streaming

import (
	"context"

	"github.com/velo-go/velo/metrics"
	"github.com/velo-go/velo/streaming/internal/inlet"
)

// outSlot is the sink of the mux path, for an SPSC Sender and an MPSC
// producer alike: the owner binds each slot to one producer, so its frames
// need no tag, and both take the arena path of pushBytes. push, pushBytes,
// retiredCh, known and the signals are the slot's own (mux_egress.go).

// finish queues the terminal. Close never waits; Finalize and Detach wait
// for the answer to a pipelined attach, so that they report its refusal
// (an MPSC attach is never pipelined, so it does not wait either).
func (s *outSlot) finish(frame []byte, _ bool) error {
	return s.terminate(frame, !inlet.SameFrame(frame, droppedFrame))
}

func (s *outSlot) anchorHandle() AnchorHandle { return s.handle }

func (s *outSlot) opsManager() (*Manager, metrics.StreamScheme) {
	return s.b.mx.m, metrics.SchemeMux
}

// transport is the mux's key: the owner answered the attach with it, or,
// for a pipelined attach, answered it to an attach before.
func (s *outSlot) transport() string { return muxWireKey }

// ready waits for the owner's answer to a pipelined attach; a slot whose
// attach waited (answered is nil) is ready at once.
func (s *outSlot) ready(ctx context.Context) error {
	if s.answered == nil {
		return nil
	}
	select {
	case <-s.answered:
	case <-ctx.Done():
		return ctx.Err()
	}
	b := s.b
	b.mu.Lock()
	defer b.mu.Unlock()
	if s.failErr != nil || s.life.closed() || s.cancelled {
		// Refused, or ended before or as the answer came (an epoch death,
		// the Manager's close): a caller deciding on this answer must not
		// take the Sender as good.
		if s.life.terminal() && s.failErr == nil && !s.cancelled {
			return nil // it ended by its own terminal, written
		}
		return s.endErr()
	}
	return nil
}
