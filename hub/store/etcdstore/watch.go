package etcdstore

import (
	"context"
	"errors"
	"time"

	"github.com/velo-go/velo/hub/store"
	"github.com/velo-go/velo/hub/store/internal/localview"
	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// watchCtx is the context of the store's watch and of its progress
// requests: the client keys watch streams by the context's metadata, so
// both must carry the same (require-leader, so a member that lost its
// leader ends the watch instead of going quiet).
func watchCtx(ctx context.Context) context.Context { return clientv3.WithRequireLeader(ctx) }

// watchLoop applies the prefix's changes to the local copy from rev+1 on.
// When the watch falls behind a compaction, it reloads and goes on from
// the reload's revision.
func (s *Store) watchLoop(rev int64) {
	defer s.wg.Done()
	for s.ctx.Err() == nil {
		ch := s.cli.Watch(watchCtx(s.ctx), s.keys.all, clientv3.WithPrefix(), clientv3.WithRev(rev+1))
		rev = s.consume(ch, rev)
	}
}

// consume applies one watch channel's responses until it ends and answers
// the revision to resume from.
func (s *Store) consume(ch clientv3.WatchChan, rev int64) int64 {
	for resp := range ch {
		if resp.CompactRevision != 0 || errors.Is(resp.Err(), errCompacted) {
			return s.reload()
		}
		if err := resp.Err(); err != nil {
			// Canceled for another reason (no leader): degraded until
			// the next watch delivers.
			s.degrade()
			return rev
		}
		if resp.IsProgressNotify() && len(resp.Events) == 0 {
			s.setApplied(resp.Header.Revision)
			continue
		}
		s.apply(resp.Events)
		if n := len(resp.Events); n > 0 {
			rev = resp.Events[n-1].Kv.ModRevision
			s.setApplied(rev)
		}
	}
	if s.ctx.Err() == nil {
		s.degrade()
		pause(s.ctx, 100*time.Millisecond)
	}
	return rev
}

func (s *Store) degrade() {
	if s.cont.Load() == store.Live {
		s.cont.Set(store.Degraded)
	}
}

func pause(ctx context.Context, d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
	case <-ctx.Done():
	}
}

// apply changes the local copy for each event and tells the hook of each
// entry that left, under mu.
func (s *Store) apply(evs []*clientv3.Event) {
	now := s.nowNanos()
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, ev := range evs {
		key := ev.Kv.Key
		if string(key) == s.keys.lock {
			if ev.Type == mvccpb.DELETE || ev.Kv.CreateRevision != s.lockRev {
				s.cont.Set(store.Fenced)
			}
			continue
		}
		id, ok := s.keys.idOf(key)
		if !ok {
			continue // a tombstone
		}
		if ev.Type == mvccpb.DELETE {
			if old := s.view.Delete(id); old != nil && s.hook != nil {
				s.hook(removalOf(old, s.reasonOf(int64(old.Inc))))
			}
			continue
		}
		if it := s.itemOf(key, ev.Kv.Value, ev.Kv.ModRevision, now); it != nil {
			s.view.Set(it)
		}
	}
}

// reload is the recovery from a compaction gap: the store is Lost, reads
// the prefix again, reports each entry that went away as a removal, and
// is Live again. It answers the revision of the read.
func (s *Store) reload() int64 {
	s.cont.Set(store.Lost)
	for s.ctx.Err() == nil {
		ctx, cancel := context.WithTimeout(s.ctx, 5*time.Second)
		resp, err := s.cli.Get(ctx, s.keys.instances, clientv3.WithPrefix())
		cancel()
		if err != nil {
			pause(s.ctx, 100*time.Millisecond)
			continue
		}
		s.replace(resp.Kvs)
		s.setApplied(resp.Header.Revision)
		s.cont.Set(store.Live)
		return resp.Header.Revision
	}
	return 0
}

// replace makes the local copy hold exactly kvs, under mu.
func (s *Store) replace(kvs []*mvccpb.KeyValue) {
	now := s.nowNanos()
	s.mu.Lock()
	defer s.mu.Unlock()
	keep := make(map[[16]byte]bool, len(kvs))
	for _, kv := range kvs {
		it := s.itemOf(kv.Key, kv.Value, kv.ModRevision, now)
		if it == nil {
			continue
		}
		keep[it.ID] = true
		if old := s.view.Get(it.ID); old != nil && old.Inc == it.Inc {
			continue // unchanged: keep its touch
		}
		s.view.Set(it)
	}
	var gone []*localview.Item[store.Record]
	s.view.Range(func(it *localview.Item[store.Record]) bool {
		if !keep[it.ID] {
			gone = append(gone, it)
		}
		return true
	})
	for _, it := range gone {
		s.view.Delete(it.ID)
		if s.hook != nil {
			s.hook(removalOf(it, s.reasonOf(int64(it.Inc))))
		}
	}
}
