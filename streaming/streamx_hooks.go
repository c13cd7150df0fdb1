package streaming

import "github.com/velo-go/velo/internal/streamx/hook"

// The Manager's counters that velo's own benchmarks and tests read, which
// are not public API (package internal/streamx).
func init() {
	h := &hook.Fns
	h.ActiveAnchors = (*Manager).activeAnchors
	h.ActiveSenders = (*Manager).activeSenders
	h.ConsumerWakes = (*Manager).consumerWakeCount
	h.UnattachedExpired = (*Manager).unattachedExpired
	h.HeartbeatInterval = (*Manager).heartbeatInterval
	h.StreamAddr = (*Manager).streamAddr
	h.WatchdogFirings = (*Manager).watchdogFirings
	h.ReservationConf = (*Manager).reservationConf
	h.MuxStats = (*Manager).muxStats
}
