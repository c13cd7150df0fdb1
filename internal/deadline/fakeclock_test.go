package deadline

import (
	"sync"
	"time"
)

// fakeClock moves only when a test calls Advance. It serves the single
// timer a queue's sweeper owns.
type fakeClock struct {
	mu    sync.Mutex
	now   time.Time
	timer *fakeTimer
	made  int            // timers created: the sweeper must create exactly one
	arms  chan time.Time // each time the timer is armed, if there is room
}

type fakeTimer struct {
	c     *fakeClock
	ch    chan time.Time
	armed bool
	when  time.Time
}

func newFakeClock() *fakeClock {
	return &fakeClock{now: time.Unix(1_700_000_000, 0), arms: make(chan time.Time, 64)}
}

func (c *fakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *fakeClock) NewTimer(d time.Duration) timer {
	c.mu.Lock()
	defer c.mu.Unlock()
	t := &fakeTimer{c: c, ch: make(chan time.Time, 1)}
	c.timer = t
	c.made++
	t.resetLocked(d)
	return t
}

// Advance moves the clock forward and fires the timer when it is due.
func (c *fakeClock) Advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d)
	if t := c.timer; t != nil && t.armed && !t.when.After(c.now) {
		t.armed = false
		select {
		case t.ch <- c.now:
		default:
		}
	}
}

// armedAt reports when the sweeper's timer will fire, if it is armed.
func (c *fakeClock) armedAt() (time.Time, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.timer == nil || !c.timer.armed {
		return time.Time{}, false
	}
	return c.timer.when, true
}

func (t *fakeTimer) C() <-chan time.Time { return t.ch }

func (t *fakeTimer) Reset(d time.Duration) {
	t.c.mu.Lock()
	defer t.c.mu.Unlock()
	t.resetLocked(d)
}

// resetLocked follows Go 1.23 timer semantics: a value not yet received is
// dropped on Reset and Stop.
func (t *fakeTimer) resetLocked(d time.Duration) {
	select {
	case <-t.ch:
	default:
	}
	t.armed, t.when = true, t.c.now.Add(d)
	select {
	case t.c.arms <- t.when:
	default:
	}
	if d <= 0 {
		t.armed = false
		t.ch <- t.c.now
	}
}

func (t *fakeTimer) Stop() {
	t.c.mu.Lock()
	defer t.c.mu.Unlock()
	t.armed = false
	select {
	case <-t.ch:
	default:
	}
}
