package etcdstore

import (
	"context"
	"errors"
	"time"

	"github.com/velo-go/velo/ext"
	"github.com/velo-go/velo/hub/store"
	"github.com/velo-go/velo/hub/store/internal/localview"
)

func (s *Store) reapLoop() {
	defer s.wg.Done()
	t := time.NewTicker(s.cfg.reapEvery)
	defer t.Stop()
	for {
		select {
		case <-s.ctx.Done():
			return
		case <-t.C:
			if s.cont.Load() == store.Live {
				_, _ = s.Reap(s.ctx)
			}
		}
	}
}

// Reap implements store.Reaper: it removes, one conditional transaction
// each, every unpinned entry of the local copy that nobody touched for
// the TTL. The hook hears each with reason Expired.
func (s *Store) Reap(ctx context.Context) (int, error) {
	deadline := s.nowNanos() - s.cfg.ttl.Nanoseconds()
	type cand struct {
		id  ext.InstanceID
		inc uint64
	}
	var cands []cand
	s.view.Range(func(it *localview.Item[store.Record]) bool {
		if !it.Pinned && it.Touched() < deadline {
			cands = append(cands, cand{it.ID, it.Inc})
		}
		return true
	})
	n := 0
	for _, c := range cands {
		// A touch since the scan saves the entry.
		if it := s.view.Get(c.id); it == nil || it.Inc != c.inc || it.Touched() >= deadline {
			continue
		}
		err := s.remove(ctx, c.id, store.Incarnation(c.inc), store.Expired)
		switch {
		case err == nil:
			n++
		case errors.Is(err, store.ErrConflict), errors.Is(err, store.ErrNotFound):
		default:
			return n, err
		}
	}
	return n, nil
}
