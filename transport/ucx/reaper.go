package ucx

import (
	"time"
)

// The endpoint idle reaper (WithEndpointIdleTimeout, off by default)
// closes endpoints that nothing used for the timeout. "Used" is both
// directions: our sends, GETs, pings and eager wireups stamp the link, and
// so does every AM the peer sends us, found by the incarnation at the
// front of its header (inbox.go's sender slots). An endpoint with a send
// or a GET outstanding is never closed, and the completion of the last
// one restarts its clock. The next use creates a new endpoint; the peer
// stays registered.

// reapPeriod is how often the reaper scans: every half timeout, and at
// least once a second. An endpoint closes between one timeout and one
// timeout plus one period after its last use.
func reapPeriod(timeout time.Duration) time.Duration {
	return min(timeout/2, time.Second)
}

// idleFor reports whether an endpoint may be closed at now: nothing in
// flight on it, no GET outstanding, and its last use at least timeout ago.
func idleFor(now, lastUse, inflight, gets int64, timeout time.Duration) bool {
	return inflight == 0 && gets == 0 && now-lastUse >= int64(timeout)
}

func (t *Transport) reapLoop() {
	tk := time.NewTicker(reapPeriod(t.o.idleTimeout))
	defer tk.Stop()
	for {
		select {
		case <-t.stop:
			return
		case <-tk.C:
			t.reapIdle(t.now())
		}
	}
}

// reapIdle closes every idle endpoint and returns how many it closed.
func (t *Transport) reapIdle(now int64) int {
	n := 0
	for _, l := range t.allLinks() {
		if l.reapIfIdle(now, t.o.idleTimeout) {
			n++
		}
	}
	return n
}

// reapIfIdle closes l's endpoint if it is idle. The check and the detach
// happen under the link's lock, which every new use takes to count
// itself, so no send can slip onto an endpoint being closed.
func (l *link) reapIfIdle(now int64, timeout time.Duration) bool {
	l.mu.Lock()
	r := l.cur
	if r == nil || !idleFor(now, l.lastUse.Load(), r.inflight.Load(), r.gets.Load(), timeout) ||
		!r.gone.CompareAndSwap(false, true) {
		l.mu.Unlock()
		return false
	}
	l.cur = nil
	l.mu.Unlock()
	t := l.t
	t.core.Observe().ActiveConnections(-1)
	t.epMu.Lock()
	delete(t.eps, r.id)
	t.epMu.Unlock()
	t.w.CloseEndpoint(r.id)
	t.stats.reaped.Add(1)
	return true
}
