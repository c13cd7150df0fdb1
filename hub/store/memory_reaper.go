package store

import (
	"context"
	"time"

	"github.com/velo-go/velo/ext"
	"github.com/velo-go/velo/hub/store/internal/localview"
)

func (s *InMemoryStore) reapLoop() {
	defer close(s.done)
	t := time.NewTicker(s.cfg.reapEvery)
	defer t.Stop()
	for {
		select {
		case <-s.stop:
			return
		case <-t.C:
			_, _ = s.Reap(context.Background())
		}
	}
}

// Reap implements Reaper: it expires every unpinned entry that nobody
// touched for the TTL. It finds candidates under the shards' read locks
// and takes the write lock once per expired entry, so writers and readers
// wait at most one removal for it.
func (s *InMemoryStore) Reap(ctx context.Context) (int, error) {
	deadline := s.nowNanos() - s.cfg.ttl.Nanoseconds()
	type cand struct {
		id  ext.InstanceID
		inc uint64
	}
	var cands []cand
	s.view.Range(func(it *localview.Item[Record]) bool {
		if !it.Pinned && it.Touched() < deadline {
			cands = append(cands, cand{it.ID, it.Inc})
		}
		return true
	})
	n := 0
	for _, c := range cands {
		if err := ctx.Err(); err != nil {
			return n, err
		}
		if s.expire(c.id, c.inc, deadline) {
			n++
		}
	}
	return n, nil
}

// expire removes the entry of id if it is still at inc and still untouched
// since deadline.
func (s *InMemoryStore) expire(id ext.InstanceID, inc uint64, deadline int64) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	it := s.view.Get(id)
	if s.closed || it == nil || it.Inc != inc || it.Touched() >= deadline {
		return false
	}
	s.removeLocked(id, Expired)
	return true
}
