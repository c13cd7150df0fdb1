package inlet

import (
	"time"

	"github.com/velo-go/velo/streaming/internal/streamerr"
)

// The unattached deadline of an anchor, as the inlet keeps it: armed while
// no producer holds the anchor, one entry in the Manager's queue
// (streaming's reservation.go), no goroutine and no timer. Every read and write of
// st.armed and st.deadline is here, under mu.

// armLocked starts an unattached window: one entry in the Manager's queue,
// no goroutine and no timer. It does nothing for an anchor that has ended
// or waits Forever. The caller holds st.mu; the queue's shard lock nests
// inside it (the sweeper calls expireUnattached with no queue lock held).
func (st *State) armLocked() {
	life := st.lifetimeLocked()
	if st.endErr != nil || st.closed || life == Forever {
		return
	}
	m := st.home
	now := time.Now()
	st.deadline = satAdd(int64(now.Sub(m.Base)), life)
	st.armed = true
	m.Deadlines.Add(st.handle.LocalID(), now.Add(life))
}

// disarmLocked takes the unattached deadline out of the queue (attach).
func (st *State) disarmLocked() {
	if st.armed {
		st.armed = false
		st.home.Deadlines.Remove(st.handle.LocalID())
	}
}

// renewLocked moves a live unattached deadline to a full window from now.
// Reset does nothing for an entry the sweeper has already taken to expire,
// so a renewal that races with the expiry cannot revive the stream: the
// deadline stays, and expireUnattached ends the anchor.
func (st *State) renewLocked() {
	if !st.armed || st.endErr != nil || st.closed {
		return // attached, cancelled, expired or closed: a no-op
	}
	m := st.home
	life := st.lifetimeLocked()
	now := time.Now()
	if m.Deadlines.Reset(st.handle.LocalID(), now.Add(life)) {
		st.deadline = satAdd(int64(now.Sub(m.Base)), life)
	}
}

// Arm starts the anchor's first unattached window.
func (st *State) Arm() {
	st.mu.Lock()
	st.armLocked()
	st.mu.Unlock()
}

// Renew moves a live unattached deadline to a full window from now, and
// returns the anchor's unclaimed mux pre-bind, whose accept window the
// caller extends too (nil: none).
func (st *State) Renew() Prebind {
	st.mu.Lock()
	defer st.mu.Unlock()
	st.renewLocked()
	return st.prebindLocked()
}

// ExpireIfDue ends the anchor with ErrUnattachedTimeout when its deadline
// is armed and has passed, and says whether it did. The queue's entry may
// be stale: the anchor attached, or attached and detached (a new window, a
// new entry), or was renewed, since the sweeper popped it; armed and the
// deadline tell.
func (st *State) ExpireIfDue() bool {
	m := st.home
	st.mu.Lock()
	defer st.mu.Unlock()
	if !st.armed || st.closed || m.now() < st.deadline {
		return false
	}
	st.armed = false
	// Out of the registry and counted before the consumer wakes, so that
	// a consumer that sees the end finds nothing left behind. remove
	// takes a registry shard lock inside st.mu; nothing takes them the
	// other way.
	m.Owner.Remove(st)
	m.Owner.CountExpired()
	st.endLocked(streamerr.ErrUnattachedTimeout)
	return true
}
