package hub

import (
	"sync"
	"time"

	"github.com/velo-go/velo/ext"
	"github.com/velo-go/velo/hub/store"
)

// removals is the removal hook's queue. The hook runs inside the store,
// so it only revokes (Authority.revoke) and pushes here; it never waits
// for the registration lock. The lifecycle goroutine takes the lock and
// delivers.
type removals struct {
	mu sync.Mutex
	q  []store.Removal
	// last is the greatest incarnation of each owner the hook heard
	// removed and the lifecycle has not delivered yet. A registration
	// reads it right after its write: a removal that raced the write is
	// there, since the store calls the hook before the write returns.
	last   map[ext.InstanceID]store.Incarnation
	signal chan struct{} // capacity 1: work is queued
}

func newRemovals() removals {
	return removals{last: map[ext.InstanceID]store.Incarnation{}, signal: make(chan struct{}, 1)}
}

func (r *removals) push(x store.Removal) {
	r.mu.Lock()
	r.q = append(r.q, x)
	id := x.Peer.InstanceID
	if x.Incarnation > r.last[id] {
		r.last[id] = x.Incarnation
	}
	r.mu.Unlock()
	select {
	case r.signal <- struct{}{}:
	default:
	}
}

func (r *removals) take() []store.Removal {
	r.mu.Lock()
	defer r.mu.Unlock()
	q := r.q
	r.q = nil
	return q
}

// delivered forgets the record of x once the lifecycle delivered it.
func (r *removals) delivered(x store.Removal) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.last[x.Peer.InstanceID] == x.Incarnation {
		delete(r.last, x.Peer.InstanceID)
	}
}

// removedAt: the hook heard owner's entry at inc (or a later one)
// removed.
func (r *removals) removedAt(owner ext.InstanceID, inc store.Incarnation) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	last, ok := r.last[owner]
	return ok && last >= inc
}

// onRemoval is the store's removal hook: revoke at once, queue.
func (h *Hub) onRemoval(x store.Removal) {
	if x.Pinned {
		return
	}
	h.auth.revoke(x.Peer.InstanceID, x.Incarnation)
	h.rem.push(x)
	h.chg.notify()
}

// lifecycle delivers queued removals, and settles writes whose outcome
// was unknown (retrying every settleRetry), under the registration lock
// until loopsStop closes. Shutdown delivers what is left itself.
func (h *Hub) lifecycle() {
	defer h.loops.Done()
	for {
		var retry <-chan time.Time
		var t *time.Timer
		if h.settles.pending() {
			t = time.NewTimer(h.settleRetry())
			retry = t.C
		}
		select {
		case <-h.loopsStop:
			return
		case <-h.rem.signal:
		case <-h.settles.wake:
		case <-retry:
		}
		if t != nil {
			t.Stop()
		}
		unlock, ok := h.acquireForever(h.loopsStop)
		if !ok {
			return
		}
		h.deliverQueued()
		h.settlePending()
		unlock()
	}
}

// deliverQueued delivers every queued removal; the caller holds the lock.
func (h *Hub) deliverQueued() {
	for _, x := range h.rem.take() {
		h.deliverRemoval(x.Peer.InstanceID, x.Incarnation)
		h.rem.delivered(x)
	}
}

// deliverRemoval runs on_removed on each extension in reverse start
// order, then forgets the velo peer unless a later incarnation replaced
// it, then lets the owner register again. The caller holds the lock.
func (h *Hub) deliverRemoval(owner ext.InstanceID, inc store.Incarnation) {
	h.deliverToExtensions(owner, inc)
	if g := h.auth.get(owner); g != nil && g.lease.Incarnation > inc {
		return // a later registration replaced it: keep its peer
	}
	if h.node != nil {
		h.node.UnregisterPeer(owner)
	}
	h.auth.drop(owner, inc)
}

func (h *Hub) deliverToExtensions(owner ext.InstanceID, inc store.Incarnation) {
	for i := len(h.plan.exts) - 1; i >= 0; i-- {
		e := h.plan.exts[i]
		func() {
			defer func() {
				if r := recover(); r != nil {
					h.log.Error("hub: on_removed panicked", "extension", e.Name(), "panic", r)
				}
			}()
			e.OnRemoved(owner, inc)
		}()
	}
}
