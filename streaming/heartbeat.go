package streaming

import (
	"time"

	wire "github.com/velo-go/velo/internal/streamwire"
)

// Heartbeats and the watchdog of streams between workers. The per-stream
// path's are in framepath (the heartbeater of a node's producer streams,
// the watchdog of each reader); the mux's in internal/mux (sweep.go,
// watchdog.go). Both detect a silent stream alike.

// detectionMultiplier is how many heartbeat windows without a frame end a
// remote stream (the reference's DETECTION_MULTIPLIER).
const detectionMultiplier = wire.DetectionMultiplier

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
	n := m.remote.tcp.WatchdogFirings()
	if mx := m.remote.mux; mx != nil { // mux streams have their own watchdog
		n += mx.N.WatchdogFirings.Load()
	}
	return n
}
