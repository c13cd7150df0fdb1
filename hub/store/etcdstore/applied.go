package etcdstore

import (
	"context"
	"time"

	"github.com/velo-go/velo/hub/store"
)

// setApplied records that the local copy reflects rev, and wakes waiters.
func (s *Store) setApplied(rev int64) {
	if rev <= s.applied.Load() {
		return
	}
	s.appliedMu.Lock()
	s.applied.Store(rev)
	close(s.appliedCh)
	s.appliedCh = make(chan struct{})
	s.appliedMu.Unlock()
}

// progressEvery is how often a waiter asks etcd for a progress
// notification when its revision brought no event on the prefix (a
// conditional transaction that failed changes nothing we watch).
const progressEvery = 50 * time.Millisecond

// waitApplied waits until the watch has applied rev and run the removal
// hook for everything up to it.
func (s *Store) waitApplied(ctx context.Context, rev int64) error {
	for {
		s.appliedMu.Lock()
		ch := s.appliedCh
		s.appliedMu.Unlock()
		if s.applied.Load() >= rev {
			return nil
		}
		t := time.NewTimer(progressEvery)
		select {
		case <-ch:
		case <-t.C:
			_ = s.cli.RequestProgress(watchCtx(ctx))
		case <-ctx.Done():
			t.Stop()
			return ctx.Err()
		case <-s.ctx.Done():
			t.Stop()
			return store.ErrClosed
		}
		t.Stop()
	}
}
