package streaming

import (
	"errors"
	"net"
	"os"
	"sync"
	"sync/atomic"
	"time"

	wire "github.com/velo-go/velo/internal/streamwire"
	"github.com/velo-go/velo/streaming/internal/inlet"
)

// Heartbeats and the watchdog of the per-stream path (the reference's
// heartbeat task in sender.rs and the reader pump's watchdog in
// tcp_transport.rs).
//
// The producer's Manager runs one goroutine, the heartbeater, for all its
// remote senders: each heartbeat interval that the consumer answered the
// attach with, it queues a Heartbeat frame on every sender that queued
// nothing since its last beat, unless the sender's egress is full (then
// the beat is dropped: a saturated stream goes silent, which is what the
// watchdog is there to see). It never waits. Senders on the anchor's own
// worker get none.
//
// The consumer's reader of each stream watches the connection with its
// read deadline, the one timer of the stream: it moves the deadline only
// when it is within half a window of the last frame, and a frame that is
// read wins over a deadline that passed. After detectionMultiplier windows
// with no frame it ends the stream with ErrSenderDropped, counts the firing
// (streamx.WatchdogFirings) and logs one warning.

// detectionMultiplier is how many heartbeat windows without a frame end a
// remote stream (the reference's DETECTION_MULTIPLIER).
const detectionMultiplier = wire.DetectionMultiplier

// heartbeatFrame is the Heartbeat stream frame, shared by every sender.
var heartbeatFrame = []byte(wire.HeartbeatFrame)

// WithHeartbeatInterval sets the heartbeat interval this node answers an
// attach with, and watches its remote streams with: a stream from which
// nothing arrives for detectionMultiplier intervals ends with
// ErrSenderDropped. defaultHeartbeatInterval (5 s) unless set; a value
// below one millisecond (the unit on the wire) is taken as the default.
func WithHeartbeatInterval(d time.Duration) ManagerOption {
	return ManagerOption{func(c *nodeConfig) { c.heartbeat = d }}
}

// heartbeatInterval is the interval this node answers attaches with and
// watches its remote streams by; 0 for a Manager from NewManager, which
// has no remote streams.
func (m *Manager) heartbeatInterval() time.Duration {
	if m.remote == nil {
		return 0
	}
	return m.remote.heartbeat
}

// watchdogFirings counts the remote streams of this Manager that its
// watchdog ended: detectionMultiplier heartbeat windows passed with
// nothing from the producer (velo_streaming_heartbeat_watchdog_firings_total
// in the reference). It is the signal of a watchdog kill: the consumer's
// ErrSenderDropped alone does not tell it from a producer that closed.
func (m *Manager) watchdogFirings() uint64 {
	if m.remote == nil {
		return 0
	}
	n := m.remote.firings.Load()
	if mx := m.remote.mux; mx != nil { // mux streams have their own watchdog
		n += mx.N.WatchdogFirings.Load()
	}
	return n
}

// heartbeater is the one goroutine of a Manager that beats its remote
// senders.
type heartbeater struct {
	wake   chan struct{} // cap 1: a sender was added
	stop   chan struct{} // closed by stopRemote
	paused atomic.Bool   // test hook: beat nobody (a stopped producer)
	beats  atomic.Uint64 // heartbeats queued
	drops  atomic.Uint64 // heartbeats dropped on a full egress

	mu      sync.Mutex
	senders map[*remoteSender]*beatState
}

// beatState is one sender's schedule, guarded by heartbeater.mu.
type beatState struct {
	interval time.Duration
	next     time.Time
}

func newHeartbeater() *heartbeater {
	return &heartbeater{
		wake:    make(chan struct{}, 1),
		stop:    make(chan struct{}),
		senders: make(map[*remoteSender]*beatState),
	}
}

// add schedules rs's first beat one interval from now. An interval of
// zero (a consumer that watches nothing) schedules none.
func (h *heartbeater) add(rs *remoteSender, interval time.Duration) {
	if interval <= 0 {
		return
	}
	h.mu.Lock()
	h.senders[rs] = &beatState{interval: interval, next: time.Now().Add(interval)}
	h.mu.Unlock()
	select {
	case h.wake <- struct{}{}:
	default:
	}
}

func (h *heartbeater) remove(rs *remoteSender) {
	h.mu.Lock()
	delete(h.senders, rs)
	h.mu.Unlock()
}

// run beats until stop closes. It sleeps on one timer until the earliest
// beat that is due, and not at all while there is no sender.
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

// beat beats every sender that is due and returns when the next one is
// (zero if none).
func (h *heartbeater) beat(now time.Time) time.Time {
	paused := h.paused.Load()
	var next time.Time
	h.mu.Lock()
	defer h.mu.Unlock()
	for rs, b := range h.senders {
		if !b.next.After(now) {
			if !paused {
				h.beatOne(rs)
			}
			b.next = now.Add(b.interval)
		}
		if next.IsZero() || b.next.Before(next) {
			next = b.next
		}
	}
	return next
}

// beatOne queues a heartbeat on rs if it queued nothing since the last
// beat and its egress has room. It takes rs.mu under h.mu; rs never takes
// h.mu under rs.mu.
func (h *heartbeater) beatOne(rs *remoteSender) {
	rs.mu.Lock()
	switch {
	case rs.done || rs.cancelled:
		rs.mu.Unlock()
		return
	case rs.active:
		// A frame went out since the last beat: the consumer heard of
		// the stream already.
		rs.active = false
		rs.mu.Unlock()
		return
	case len(rs.q) >= egressCapacity:
		rs.mu.Unlock()
		h.drops.Add(1)
		return
	}
	rs.q = append(rs.q, heartbeatFrame)
	first := len(rs.q) == 1
	rs.mu.Unlock()
	h.beats.Add(1)
	if first {
		rs.wake()
	}
}

// watchdog is the silence detector of one stream's reader. It is used by
// that reader's goroutine only.
type watchdog struct {
	c        net.Conn
	window   time.Duration
	last     time.Time // when the last frame was forwarded (or the stream began)
	deadline time.Time // the connection's read deadline
	misses   int       // dead windows since last
}

// start arms the deadline one window from now: the stream's connection
// has just sent its preamble.
func (w *watchdog) start(c net.Conn, window time.Duration) {
	w.c, w.window = c, window
	w.last = time.Now()
	w.deadline = w.last.Add(window)
	c.SetReadDeadline(w.deadline)
}

// frame stamps a frame that was forwarded, moving the deadline only when
// it is within half a window: under steady traffic it moves at most twice
// per window.
func (w *watchdog) frame() {
	now := time.Now()
	w.last, w.misses = now, 0
	if w.deadline.Sub(now) < w.window/2 {
		w.deadline = now.Add(w.window)
		w.c.SetReadDeadline(w.deadline)
	}
}

// expired reports whether err is the read deadline passing, and if so
// whether that ends the stream: detectionMultiplier windows after the last
// frame. Otherwise it re-arms the deadline and the read goes on (the
// frame reader keeps a partial frame across the timeout).
func (w *watchdog) expired(err error) (timeout, fire bool) {
	if !errors.Is(err, os.ErrDeadlineExceeded) {
		return false, false
	}
	now := time.Now()
	// A window is dead only if no frame came in it: the deadline was not
	// moved for frames that came while it was more than half a window
	// away.
	w.misses = int(now.Sub(w.last) / w.window)
	if w.misses >= detectionMultiplier {
		return true, true
	}
	w.deadline = w.last.Add(time.Duration(w.misses+1) * w.window)
	w.c.SetReadDeadline(w.deadline)
	return true, false
}

// fire ends st's stream on the watchdog: Dropped behind what the inlet
// holds (terminals go past its capacity, so it is never lost), one count
// and one warning with the stream's depths.
func (r *remote) fire(st *inlet.State, proxy *inlet.Sender, w *watchdog) {
	depth := st.Depth()
	r.firings.Add(1)
	if met := r.m.met; met != nil {
		met.WatchdogFiring()
	}
	r.log.Warn("velo: stream heartbeat watchdog fired, injecting Dropped (saturation indicator: a full inlet means a slow consumer)",
		"local_id", st.Handle().LocalID(),
		"anchor_inlet_len", depth,
		"anchor_inlet_cap", st.Cap(),
		"silent_ms", time.Since(w.last).Milliseconds(),
		"heartbeat_deadline_ms", w.window.Milliseconds(),
		"detection_multiplier", detectionMultiplier)
	st.Terminate(proxy, droppedFrame, false)
}
