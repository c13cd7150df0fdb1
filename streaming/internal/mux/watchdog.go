package mux

import (
	"log/slog"
	"sync/atomic"
	"time"

	"github.com/velo-go/velo/internal/muxwire"
	wire "github.com/velo-go/velo/internal/streamwire"
)

// The warning of the mux stream watchdog (the book's saturation chapter):
// one line when it ends a single-sender stream, with what the consumer
// still held, so an operator can tell a silent producer from a slow
// consumer. The count (watchdogFirings) is exact; the line is not: one
// congested peer link can end thousands of streams in one window, and one
// line per stream would bury the log.

// watchdogWarnEvery is the least time between two watchdog warnings of
// one mux.
const watchdogWarnEvery = 10 * time.Second

// logLimiter lets a line through at most once per watchdogWarnEvery.
type logLimiter struct{ last atomic.Int64 }

func (l *logLimiter) allow() bool {
	now := time.Now().UnixNano()
	last := l.last.Load()
	if last != 0 && now-last < int64(watchdogWarnEvery) {
		return false
	}
	return l.last.CompareAndSwap(last, now)
}

// watchdogFiring is what the warning reports of one ended stream, taken
// under the ingress lock and written after it is released.
type watchdogFiring struct {
	localID   uint64
	bufferLen int    // records delivered to the anchor and not yet taken
	arrivals  uint32 // the frame_seq the slot expects next: records in order, its open included
	window    time.Duration
}

// firingLocked reads what the warning needs from s. The caller holds the
// ingress table's lock (the anchor's lock nests in it).
func (s *InSlot) firingLocked(window time.Duration) *watchdogFiring {
	return &watchdogFiring{localID: s.st.Handle().LocalID(), bufferLen: s.st.Depth(), arrivals: s.nextSeq, window: window}
}

// logFiring writes the warning.
func (mx *Mux) logFiring(f *watchdogFiring) {
	log := mx.Log
	if log == nil {
		log = slog.Default()
	}
	log.Warn("stream_watchdog: nothing arrived from a sender holding credit for the detection window, injecting Dropped",
		"local_id", f.localID,
		"slot_buffer_len", f.bufferLen,
		"arrivals", f.arrivals,
		"heartbeat_deadline_ms", f.window.Milliseconds(),
		"detection_multiplier", wire.DetectionMultiplier)
}

// watch is one watchdog window over the peer's slots: a slot that got
// nothing while its producer held credit misses the window; after
// detectionMultiplier misses it ends with Dropped, and its producer is
// told (CloseSlot{UnknownSlot}), as the per-stream path tells it by
// closing the stream's connection: a producer whose writes are stuck but
// who still hears this node learns that its stream is gone rather than
// hold it open. (It hears it on a connection that has already carried
// this node's credit, so proved itself: a new one could not prove itself
// while the producer's writes to this node are stuck.)
func (ip *IngressPeer) watch() {
	var fired *watchdogFiring
	var ended []muxwire.SlotID
	ip.Mu.Lock()
	for _, s := range ip.Slots {
		if s != nil {
			ended = ip.watchSlotLocked(s, &fired, ended)
		}
	}
	for _, s := range ip.aside { // a staged record may never come
		ended = ip.watchSlotLocked(s, &fired, ended)
	}
	ip.bodies.idleLocked() // a table that got no data this window keeps no block
	ip.Mu.Unlock()
	if fired != nil {
		ip.mx.logFiring(fired)
	}
	if len(ended) == 0 {
		return
	}
	if b, err := ip.mx.replyBatcher(ip.peer, ip.lane); err == nil {
		for _, id := range ended {
			b.ReplyClose(id, muxwire.UnknownSlot)
		}
	}
}

// watchSlotLocked is one window of the watchdog over s; fired takes what
// the warning reports of the first firing it lets through, and the slot
// is appended to ended when it ends.
func (ip *IngressPeer) watchSlotLocked(s *InSlot, fired **watchdogFiring, ended []muxwire.SlotID) []muxwire.SlotID {
	switch {
	case s.delivered || s.Held == 0:
		s.delivered, s.misses = false, 0
	default:
		s.misses++
		if s.misses >= wire.DetectionMultiplier {
			// Counted before the end is delivered, so that a consumer
			// that sees ErrSenderDropped can tell a watchdog kill. An
			// MPSC producer's end is not counted, as in the reference.
			if s.mpsc == nil {
				ip.mx.N.WatchdogFirings.Add(1)
				if *fired == nil && ip.mx.watchdogWarn.allow() {
					*fired = s.firingLocked(ip.mx.heartbeat)
				}
			}
			ip.endLocked(s, true)
			ended = append(ended, s.id)
		}
	}
	return ended
}
