package mux

import (
	"context"

	wire "github.com/velo-go/velo/internal/streamwire"
	"github.com/velo-go/velo/metrics"
	"github.com/velo-go/velo/streaming/internal/inlet"
)

// OutSlot is the sink of the mux path, for an SPSC Sender and an MPSC
// producer alike: the owner binds each slot to one producer, so its frames
// need no tag, and both take the arena path of pushBytes. push, pushBytes,
// RetiredCh, known and the signals are the slot's own (egress.go).

// Finish queues the terminal. Close never waits; Finalize and Detach wait
// for the answer to a pipelined attach, so that they report its refusal
// (an MPSC attach is never pipelined, so it does not wait either).
func (s *OutSlot) Finish(frame []byte, _ bool) error {
	return s.terminate(frame, !inlet.SameFrame(frame, inlet.DroppedFrame))
}

func (s *OutSlot) AnchorHandle() wire.AnchorHandle { return s.Handle }

func (s *OutSlot) OpsMetrics() (*metrics.StreamingMetrics, metrics.StreamScheme) {
	return s.B.Mx.OpsMet, metrics.SchemeMux
}

// Transport is the mux's key: the owner answered the attach with it, or,
// for a pipelined attach, answered it to an attach before.
func (s *OutSlot) Transport() string { return WireKey }

// Ready waits for the owner's answer to a pipelined attach; a slot whose
// attach waited (not Pipelined) is ready at once.
func (s *OutSlot) Ready(ctx context.Context) error {
	if !s.pipelined {
		return nil
	}
	b := s.B
	b.Mu.Lock()
	defer b.Mu.Unlock()
	if !s.answered {
		w := s.answeredLocked()
		b.Mu.Unlock()
		select {
		case <-w:
		case <-ctx.Done():
			b.Mu.Lock() // for the deferred unlock
			return ctx.Err()
		}
		b.Mu.Lock()
	}
	if s.failErr != nil || s.Life.Closed() || s.cancelled {
		// Refused, or ended before or as the answer came (an epoch death,
		// the Manager's close): a caller deciding on this answer must not
		// take the Sender as good.
		if s.Life.Terminal() && s.failErr == nil && !s.cancelled {
			return nil // it ended by its own terminal, written
		}
		return s.endErr()
	}
	return nil
}
