package events

// defaultCacheSize bounds the outcomes kept for waits that come late.
const defaultCacheSize = 4096

type result struct {
	poisoned bool
	reason   string
}

func (r result) err(h Handle) error {
	if r.poisoned {
		return &PoisonedError{Handle: h, Reason: r.reason}
	}
	return nil
}

// resultCache remembers the outcomes of recent events, oldest forgotten
// first. Callers hold the manager's lock.
type resultCache struct {
	m    map[Handle]result
	ring []Handle
	next int
}

func newResultCache(n int) *resultCache {
	// The map grows with use rather than being sized for n up front: a
	// node that sees few remote events keeps a small map, and the collector
	// scans the map's memory on every cycle.
	return &resultCache{m: make(map[Handle]result), ring: make([]Handle, n)}
}

func (c *resultCache) get(h Handle) (result, bool) {
	r, ok := c.m[h]
	return r, ok
}

func (c *resultCache) put(h Handle, poisoned bool, reason string) {
	if old := c.ring[c.next]; !old.IsZero() {
		delete(c.m, old)
	}
	c.ring[c.next] = h
	c.next = (c.next + 1) % len(c.ring)
	c.m[h] = result{poisoned: poisoned, reason: reason}
}
