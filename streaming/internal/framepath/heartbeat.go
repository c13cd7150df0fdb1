package framepath

import (
	"sync"
	"sync/atomic"
	"time"

	wire "github.com/velo-go/velo/internal/streamwire"
)

// Heartbeats of the producer's streams (the reference's heartbeat task in
// sender.rs).
//
// The node runs one goroutine, the heartbeater, for all its producer
// streams: each heartbeat interval that the consumer answered the attach
// with, it queues a Heartbeat frame on every stream that queued nothing
// since its last beat, unless the stream's egress is full (then the beat
// is dropped: a saturated stream goes silent, which is what the watchdog
// is there to see). It never waits. Senders on the anchor's own worker
// get none.

// heartbeater is the one goroutine of a node that beats its producer
// streams.
type heartbeater struct {
	wake   chan struct{} // cap 1: a stream was added
	stop   chan struct{} // closed by Node.Close
	paused atomic.Bool   // test hook: beat nobody (a stopped producer)
	beats  atomic.Uint64 // heartbeats queued
	drops  atomic.Uint64 // heartbeats dropped on a full egress

	mu      sync.Mutex
	senders map[*Stream]*beatState
}

// beatState is one stream's schedule, guarded by heartbeater.mu.
type beatState struct {
	interval time.Duration
	next     time.Time
}

func newHeartbeater() *heartbeater {
	return &heartbeater{
		wake:    make(chan struct{}, 1),
		stop:    make(chan struct{}),
		senders: make(map[*Stream]*beatState),
	}
}

// add schedules s's first beat one interval from now. An interval of
// zero (a consumer that watches nothing) schedules none.
func (h *heartbeater) add(s *Stream, interval time.Duration) {
	if interval <= 0 {
		return
	}
	h.mu.Lock()
	h.senders[s] = &beatState{interval: interval, next: time.Now().Add(interval)}
	h.mu.Unlock()
	select {
	case h.wake <- struct{}{}:
	default:
	}
}

func (h *heartbeater) remove(s *Stream) {
	h.mu.Lock()
	delete(h.senders, s)
	h.mu.Unlock()
}

// run beats until stop closes. It sleeps on one timer until the earliest
// beat that is due, and not at all while there is no stream.
func (h *heartbeater) run(done func()) {
	defer done()
	t := time.NewTimer(time.Hour)
	t.Stop()
	for {
		if next := h.beat(time.Now()); !next.IsZero() {
			t.Reset(time.Until(next))
		}
		select {
		case <-t.C:
		case <-h.wake:
		case <-h.stop:
			t.Stop()
			return
		}
		t.Stop()
	}
}

// beat beats every stream that is due and returns when the next one is
// (zero if none).
func (h *heartbeater) beat(now time.Time) time.Time {
	paused := h.paused.Load()
	var next time.Time
	h.mu.Lock()
	defer h.mu.Unlock()
	for s, b := range h.senders {
		if !b.next.After(now) {
			if !paused {
				h.beatOne(s)
			}
			b.next = now.Add(b.interval)
		}
		if next.IsZero() || b.next.Before(next) {
			next = b.next
		}
	}
	return next
}

// beatOne queues a heartbeat on s if it queued nothing since the last
// beat and its egress has room. It takes s.mu under h.mu; a stream never
// takes h.mu under s.mu.
func (h *heartbeater) beatOne(s *Stream) {
	s.mu.Lock()
	switch {
	case s.done || s.cancelled:
		s.mu.Unlock()
		return
	case s.active:
		// A frame went out since the last beat: the consumer heard of
		// the stream already.
		s.active = false
		s.mu.Unlock()
		return
	case len(s.q) >= EgressCapacity:
		s.mu.Unlock()
		h.drops.Add(1)
		return
	}
	s.q = append(s.q, wire.HeartbeatBytes)
	first := len(s.q) == 1
	s.mu.Unlock()
	h.beats.Add(1)
	if first {
		s.wake()
	}
}
