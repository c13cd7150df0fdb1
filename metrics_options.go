package velo

import "github.com/velo-go/velo/messenger"

// WithSystemHandlerMetrics gives each of velo's own handlers (names that
// start with '_': stream batches, attaches, rendezvous pulls, events) its
// own series in the per-handler families of WithMetrics. Without it they
// are counted together under handler="_system",
// which keeps a node's scrape small; use it to tell, say, the mux's
// _stream_batch traffic from rendezvous pulls. It does nothing without
// WithMetrics.
func WithSystemHandlerMetrics() Option {
	return Option{apply: func(c *messenger.Config) { c.SystemHandlerMetrics = true }}
}
