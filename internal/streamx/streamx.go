// Package streamx is how velo's own programs and tests (the benchmarks,
// the tour, the robustness and interop tests) read the counters of a
// streaming.Manager that are not part of its public API: users have the
// Prometheus families (WithMetrics) for those.
//
// Each function calls an unexported method of *streaming.Manager through a
// function value that streaming's init installed (package hook), asserted
// to its type once, when this package was initialized.
package streamx

import (
	"net"
	"time"

	"github.com/velo-go/velo/internal/hookfn"
	"github.com/velo-go/velo/internal/streamx/hook"
	"github.com/velo-go/velo/streaming"
)

// MuxCounts is a snapshot of one node's mux counts.
type MuxCounts = hook.MuxStats

// typed returns v, one of hook.Fns, as F (hookfn.Typed).
func typed[F any](name string, v any) F { return hookfn.Typed[F]("streaming", name, v) }

var (
	activeAnchors     = typed[func(*streaming.Manager) int]("ActiveAnchors", hook.Fns.ActiveAnchors)
	activeSenders     = typed[func(*streaming.Manager) int]("ActiveSenders", hook.Fns.ActiveSenders)
	consumerWakes     = typed[func(*streaming.Manager) uint64]("ConsumerWakes", hook.Fns.ConsumerWakes)
	unattachedExpired = typed[func(*streaming.Manager) uint64]("UnattachedExpired", hook.Fns.UnattachedExpired)
	heartbeatInterval = typed[func(*streaming.Manager) time.Duration]("HeartbeatInterval", hook.Fns.HeartbeatInterval)
	streamAddr        = typed[func(*streaming.Manager) net.Addr]("StreamAddr", hook.Fns.StreamAddr)
	watchdogFirings   = typed[func(*streaming.Manager) uint64]("WatchdogFirings", hook.Fns.WatchdogFirings)
	reservationConf   = typed[func(*streaming.Manager) streaming.ReservationConfig]("ReservationConf", hook.Fns.ReservationConf)
	muxStats          = typed[func(*streaming.Manager) MuxCounts]("MuxStats", hook.Fns.MuxStats)
)

// ActiveAnchors is the number of anchors in m's registry.
func ActiveAnchors(m *streaming.Manager) int { return activeAnchors(m) }

// ActiveSenders is the number of m's per-stream senders to other workers.
func ActiveSenders(m *streaming.Manager) int { return activeSenders(m) }

// ConsumerWakes counts the times a consumer waiting in Next was woken by a
// frame: divided by the records read, it is the wakes per record.
func ConsumerWakes(m *streaming.Manager) uint64 { return consumerWakes(m) }

// UnattachedExpired counts the anchors m ended by their unattached deadline.
func UnattachedExpired(m *streaming.Manager) uint64 { return unattachedExpired(m) }

// HeartbeatInterval is the interval m's producers beat at.
func HeartbeatInterval(m *streaming.Manager) time.Duration { return heartbeatInterval(m) }

// StreamAddr is the address of m's per-stream TCP listener, or nil.
func StreamAddr(m *streaming.Manager) net.Addr { return streamAddr(m) }

// WatchdogFirings counts the streams m's watchdogs ended, on both paths.
func WatchdogFirings(m *streaming.Manager) uint64 { return watchdogFirings(m) }

// ReservationConfig is m's reservation configuration, defaults filled in.
func ReservationConfig(m *streaming.Manager) streaming.ReservationConfig { return reservationConf(m) }

// MuxStats returns m's mux counts; zero with no mux.
func MuxStats(m *streaming.Manager) MuxCounts { return muxStats(m) }
