package hub

import "sync"

// changes tells the instance watchers that the registrations or the
// services changed. A notice carries nothing: a watcher sends a fresh
// snapshot, so notices that come while it writes collapse into one.
type changes struct {
	mu   sync.Mutex
	subs map[chan struct{}]struct{}
}

// notify never blocks: it runs under the directory's lock and inside the
// store's removal hook.
func (c *changes) notify() {
	c.mu.Lock()
	for ch := range c.subs {
		select {
		case ch <- struct{}{}:
		default:
		}
	}
	c.mu.Unlock()
}

func (c *changes) subscribe() (<-chan struct{}, func()) {
	ch := make(chan struct{}, 1)
	c.mu.Lock()
	if c.subs == nil {
		c.subs = map[chan struct{}]struct{}{}
	}
	c.subs[ch] = struct{}{}
	c.mu.Unlock()
	return ch, func() {
		c.mu.Lock()
		delete(c.subs, ch)
		c.mu.Unlock()
	}
}
