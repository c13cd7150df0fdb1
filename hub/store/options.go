package store

import "time"

// DefaultTTL is how long an entry nobody touched stays.
const DefaultTTL = 30 * time.Second

// MemoryOption configures an InMemoryStore.
type MemoryOption struct{ apply func(*memConfig) }

type memConfig struct {
	ttl       time.Duration
	reapEvery time.Duration
	now       func() time.Time
}

// WithTTL sets how long an entry that nobody touched stays (30 s by
// default). Pinned entries never expire.
func WithTTL(d time.Duration) MemoryOption {
	return MemoryOption{func(c *memConfig) { c.ttl = d }}
}

// WithReapInterval sets how often the reaper looks for expired entries
// (a tenth of the TTL by default).
func WithReapInterval(d time.Duration) MemoryOption {
	return MemoryOption{func(c *memConfig) { c.reapEvery = d }}
}

// WithClock replaces time.Now for touches and expiry, for tests that move
// time by hand and call Reap.
func WithClock(now func() time.Time) MemoryOption {
	return MemoryOption{func(c *memConfig) { c.now = now }}
}
