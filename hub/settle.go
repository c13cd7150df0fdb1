package hub

import (
	"context"
	"sync"
	"time"

	"github.com/velo-go/velo/ext"
	"github.com/velo-go/velo/hub/store"
)

// unsettled is a registration whose store write and read-back both went
// unanswered: the write may have applied, or may still, until a
// read-back answers (a read-back that finds nothing is final). The hub
// does not guess from its local view, which may be stale: the owner stays
// busy, and the lifecycle goroutine asks the store again until it
// answers, then settles the registration as the answer says.
type unsettled struct {
	owner     ext.InstanceID
	op        store.OpID
	rec       store.Record
	b         begun
	presented bool
}

// settles is the queue of unsettled writes, drained by the lifecycle.
type settles struct {
	mu   sync.Mutex
	q    []unsettled
	wake chan struct{} // capacity 1: a write was queued
}

func newSettles() settles { return settles{wake: make(chan struct{}, 1)} }

func (s *settles) push(u unsettled) {
	s.mu.Lock()
	s.q = append(s.q, u)
	s.mu.Unlock()
	select {
	case s.wake <- struct{}{}:
	default:
	}
}

func (s *settles) pending() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.q) > 0
}

// settleRetry is how long the lifecycle waits before it asks the store
// again about writes it could not settle.
func (h *Hub) settleRetry() time.Duration { return h.timing.settleRetry }

// settlePending asks the store about each unsettled write, under the
// registration lock (the caller holds it): one that applied is settled as
// a failure after the write (the entry is removed, the extensions hear
// on_removed, the credential is refused); one that did not leaves the
// prior registration as it was. It stops at the first read-back that goes
// unanswered, since the store is likely still away, so one pass holds the
// lock for at most one step_timeout_ms beyond the answers it got.
func (h *Hub) settlePending() {
	h.settles.mu.Lock()
	q := h.settles.q
	h.settles.q = nil
	h.settles.mu.Unlock()
	for i, u := range q {
		e, ok, err := step3(h.cfg.stepTimeout(), func(ctx context.Context) (store.Entry, bool, error) {
			return h.st.ResolveWrite(ctx, u.owner, u.op)
		})
		if err != nil {
			h.settles.mu.Lock()
			h.settles.q = append(q[i:], h.settles.q...)
			h.settles.mu.Unlock()
			return
		}
		if ok {
			_, _ = h.failAfterWrite(u.owner, e.Incarnation, u.presented, u.rec, nil, errWroteUnknown)
			continue
		}
		h.undo(u.owner, u.b)
	}
}
