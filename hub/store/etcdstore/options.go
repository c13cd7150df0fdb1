package etcdstore

import (
	"time"

	"github.com/velo-go/velo/hub/store"
)

// Defaults of a Store.
const (
	DefaultPrefix     = "/velo-hub/default"
	DefaultLockTTL    = 10 * time.Second
	DefaultCustodyTTL = 5 * time.Minute
)

// Option configures a Store.
type Option struct{ apply func(*config) }

type config struct {
	prefix     string
	ttl        time.Duration
	reapEvery  time.Duration
	lockTTL    time.Duration
	custodyTTL time.Duration
	now        func() time.Time
}

func defaults() config {
	return config{
		prefix: DefaultPrefix, ttl: store.DefaultTTL, lockTTL: DefaultLockTTL,
		custodyTTL: DefaultCustodyTTL, now: time.Now,
	}
}

// WithPrefix sets the key prefix, one per hub deployment.
func WithPrefix(p string) Option { return Option{func(c *config) { c.prefix = p }} }

// WithTTL sets how long an entry nobody touched stays (30 s by default).
func WithTTL(d time.Duration) Option { return Option{func(c *config) { c.ttl = d }} }

// WithReapInterval sets how often the reaper runs (a tenth of the TTL by
// default).
func WithReapInterval(d time.Duration) Option { return Option{func(c *config) { c.reapEvery = d }} }

// WithLockTTL sets the lock lease's TTL (10 s by default; etcd's floor
// is a few election timeouts).
func WithLockTTL(d time.Duration) Option { return Option{func(c *config) { c.lockTTL = d }} }

// WithCustodyTTL sets the custody lease's TTL (5 min by default): how long
// the entries of a hub that crashed stay for the next hub.
func WithCustodyTTL(d time.Duration) Option { return Option{func(c *config) { c.custodyTTL = d }} }

// WithClock replaces time.Now for touches and expiry.
func WithClock(now func() time.Time) Option { return Option{func(c *config) { c.now = now }} }
