package framepath

import (
	"context"
	"sync"
	"time"

	"github.com/velo-go/velo/ext"
	wire "github.com/velo-go/velo/internal/streamwire"
	"github.com/velo-go/velo/metrics"
	"github.com/velo-go/velo/streaming/internal/inlet"
	"github.com/velo-go/velo/streaming/internal/retire"
	"github.com/velo-go/velo/streaming/internal/streamerr"
)

// EgressCapacity is how many frames a Stream queues for its pump before
// Push waits: the inlet's default capacity (streaming checks that the two
// agree), so the two paths push back alike.
const EgressCapacity = 256

// Stream is the producer's end of a stream to an anchor of another
// worker: the transport's stream, the frames queued for the egress pump,
// and the stream's end. It serves an SPSC Sender and an MPSC producer
// alike: the owner knows which producer a stream carries, so its frames
// need no tag.
//
// Each stream has one goroutine of the path while it lives, the egress
// pump, which hands the transport what is queued as one batch (the
// reference's egress_pump task) and watches the transport's Closed signal
// between batches, which is how a consumer's cancel is seen (the consumer
// closes the stream). The transport may run goroutines of its own (TCP: a
// watcher blocked in a Read). Its heartbeats come from the node's one
// heartbeater (heartbeat.go), not from a goroutine of its own.
//
// It is the sink a streaming.Sender or MPSCSender talks to on this path:
// its exported methods are that interface's (streaming/sink.go).
type Stream struct {
	n         *Node
	handle    wire.AnchorHandle
	key       string
	out       ext.FrameSender
	id        uint64        // the stream id in the attach's CancelHandle: the registry key
	stopCh    chan struct{} // closed by _stream_stop only
	cancelCh  chan struct{} // closed when the consumer cancels or the connection fails
	doneCh    chan struct{} // closed by the first of the two
	pumpWake  chan struct{} // cap 1: frames were queued, or the stream ended
	spaceWait chan struct{} // senders wait for room

	mu        sync.Mutex
	q         [][]byte
	active    bool // a frame was queued since the last heartbeat (heartbeat.go)
	done      bool // a terminal is queued
	cancelled bool
	stopped   bool          // stopCh is closed
	why       error         // the first signal's cause (Sender.Context)
	onFire    []func(error) // Sender.Context's cancel, run by the first signal
	lossTimer *time.Timer   // the grace of a connection that ended before any message
	closing   bool          // the pump handed on the terminal: the stream's end is its own
	ret       retire.Settlement
}

// NewStream makes the producer's end of a stream to handle's anchor, with
// id its stream id (the one its attach's cancel handle carries). It does
// not register it (Register).
func (n *Node) NewStream(handle wire.AnchorHandle, id uint64) *Stream {
	return &Stream{
		n: n, handle: handle, id: id,
		stopCh: make(chan struct{}), cancelCh: make(chan struct{}), doneCh: make(chan struct{}), pumpWake: make(chan struct{}, 1),
	}
}

// AnchorHandle names the stream's anchor.
func (s *Stream) AnchorHandle() wire.AnchorHandle { return s.handle }

// ID is the stream id of the attach's cancel handle.
func (s *Stream) ID() uint64 { return s.id }

// Transport is the key the owner answered the attach with ("tcp-stream",
// "grpc-stream", ...), "" before the stream opened.
func (s *Stream) Transport() string { return s.key }

// OpsMetrics is where the producer's operations are counted (nil:
// nowhere), under this path's scheme.
func (s *Stream) OpsMetrics() (*metrics.StreamingMetrics, metrics.StreamScheme) {
	return s.n.met, s.scheme()
}

// scheme is the path's, once the stream opened (its key is the path's).
func (s *Stream) scheme() metrics.StreamScheme {
	if s.key == "" {
		return metrics.SchemeUnknown
	}
	return s.n.scheme
}

// Ready is nil: the per-stream attach waits for its answer.
func (s *Stream) Ready(context.Context) error { return nil }

// Push queues one frame for the pump, waiting while the queue is full:
// until there is room, ctx ends, or the stream is cancelled. A frame over
// the path's limit is refused with *streamerr.ItemTooLargeError, and the
// stream goes on.
func (s *Stream) Push(ctx context.Context, frame []byte) error {
	if len(frame) > s.n.maxFrame {
		return &streamerr.ItemTooLargeError{Size: len(frame), Limit: s.n.maxFrame}
	}
	waited := false // counted once per send, however long it waits
	s.mu.Lock()
	for {
		switch {
		case s.done:
			s.mu.Unlock()
			return streamerr.ErrSenderClosed
		case s.cancelled:
			s.mu.Unlock()
			return streamerr.ErrCancelled
		case len(s.q) < EgressCapacity:
			s.q = append(s.q, frame)
			s.active = true
			first := len(s.q) == 1
			s.mu.Unlock()
			if first {
				s.wake()
			}
			return nil
		}
		if !waited {
			waited = true
			if met := s.n.met; met != nil {
				met.ProducerBackpressure(s.scheme())
			}
		}
		if s.spaceWait == nil {
			s.spaceWait = make(chan struct{})
		}
		w := s.spaceWait
		s.mu.Unlock()
		select {
		case <-w:
		case <-ctx.Done():
			return ctx.Err()
		}
		s.mu.Lock()
	}
}

func (s *Stream) wake() {
	select {
	case s.pumpWake <- struct{}{}:
	default:
	}
}

func (s *Stream) wakeSpaceLocked() {
	if s.spaceWait != nil {
		close(s.spaceWait)
		s.spaceWait = nil
	}
}

// PushBytes queues the byte item of payload. It makes the frame: the
// pump writes queued frames as they are.
func (s *Stream) PushBytes(ctx context.Context, payload []byte) error {
	return s.Push(ctx, wire.BytesItem(payload))
}

// Finish queues the producer's terminal frame past the queue's capacity;
// it never waits. The owner's side tells a detach by its frame, so detach
// is not needed here. The pump writes it behind every frame before it and
// retires the stream.
func (s *Stream) Finish(frame []byte, _ bool) error {
	s.mu.Lock()
	if s.done {
		s.mu.Unlock()
		return streamerr.ErrSenderClosed
	}
	s.done = true
	if s.cancelled {
		s.mu.Unlock()
		s.retire(retire.Discarded)
		s.wake()
		return streamerr.ErrCancelled
	}
	s.q = append(s.q, frame)
	s.wakeSpaceLocked()
	s.mu.Unlock()
	s.wake()
	return nil
}

// retire records the outcome once and wakes whoever waits for it.
func (s *Stream) retire(out retire.Outcome) {
	// Out of the registry first: whoever sees the outcome finds no entry.
	s.n.Unregister(s)
	s.mu.Lock()
	if s.ret.Known() != 0 {
		s.mu.Unlock()
		return
	}
	s.ret.SettleLocked(out)
	s.mu.Unlock()
}

// Known is the outcome of the stream's output, 0 until it has ended.
func (s *Stream) Known() retire.Outcome { return s.ret.Known() }

// RetiredCh closes once the outcome is known. It takes the lock only
// while the outcome is unknown.
func (s *Stream) RetiredCh() <-chan struct{} {
	if s.ret.Known() != 0 {
		return s.ret.Closed()
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.ret.WatchLocked()
}

// fail marks the stream cancelled, with why as the cause Sender.Context
// reports: ErrCancelled for the consumer's cancel, ErrConsumerLost when
// its connection or node went.
func (s *Stream) fail(why error) {
	s.mu.Lock()
	if s.cancelled || s.closing {
		s.mu.Unlock()
		return
	}
	s.cancelled = true
	close(s.cancelCh)
	s.fireLocked(why)
	s.wakeSpaceLocked()
	if s.lossTimer != nil {
		s.lossTimer.Stop()
	}
	s.mu.Unlock()
	s.wake()
}

// fireLocked closes Done on the first signal and keeps its cause.
func (s *Stream) fireLocked(why error) {
	if s.why == nil {
		s.why = why
		close(s.doneCh)
		for _, fn := range s.onFire {
			fn(why)
		}
		s.onFire = nil
	}
}

// WatchFire runs fn with the cause at the first signal (under the
// stream's lock: fn must not block), or returns the cause if one has
// fired already.
func (s *Stream) WatchFire(fn func(error)) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.why != nil {
		return s.why
	}
	s.onFire = append(s.onFire, fn)
	return nil
}

// Cause is the first signal's cause, or nil.
func (s *Stream) Cause() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.why
}

// stop fires Stopped only: the consumer asked for a graceful end, and the
// producer may still send its last items and Finalize. A stop that comes
// after a cancel does nothing.
func (s *Stream) stop() {
	s.mu.Lock()
	if !s.stopped && !s.cancelled {
		s.stopped = true
		close(s.stopCh)
		s.fireLocked(streamerr.ErrStopRequested)
	}
	s.mu.Unlock()
}

// SignalCh is the channel of one of the producer's signals: Stopped,
// Cancelled or Done.
func (s *Stream) SignalCh(k inlet.SignalKind) <-chan struct{} {
	switch k {
	case inlet.SigStop:
		return s.stopCh
	case inlet.SigCancel:
		return s.cancelCh
	}
	return s.doneCh
}
