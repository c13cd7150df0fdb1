package store_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/velo-go/velo/ext"
	"github.com/velo-go/velo/hub/store"
)

func rec(id ext.InstanceID) store.Record {
	return store.Record{Peer: ext.PeerInfo{InstanceID: id, Address: ext.WorkerAddress{"tcp": []byte("127.0.0.1:1")}}, Epoch: 1}
}

func TestMemoryBasics(t *testing.T) {
	ctx := context.Background()
	s, err := store.NewInMemoryStore()
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close(ctx)
	id := ext.NewInstanceID()
	inc1, err := s.Put(ctx, store.NewOpID(), rec(id), 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.Put(ctx, store.NewOpID(), rec(id), 0); !errors.Is(err, store.ErrConflict) {
		t.Fatalf("second create: %v", err)
	}
	inc2, err := s.Put(ctx, store.NewOpID(), rec(id), inc1)
	if err != nil || inc2 <= inc1 {
		t.Fatalf("replace: %d %v", inc2, err)
	}
	if err := s.Remove(ctx, id, inc1); !errors.Is(err, store.ErrConflict) {
		t.Fatalf("stale remove: %v", err)
	}
	if p, ok := s.LookupWorker(id.WorkerID()); !ok || p.Incarnation != inc2 {
		t.Fatalf("lookup worker: %+v %v", p, ok)
	}
	if err := s.Remove(ctx, id, inc2); err != nil {
		t.Fatal(err)
	}
	if err := s.Touch(id, inc2); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("touch after remove: %v", err)
	}
}

func TestMemoryHookHearsRemovalsBeforeReturn(t *testing.T) {
	ctx := context.Background()
	now := time.Unix(1000, 0)
	var clockMu sync.Mutex
	clock := func() time.Time { clockMu.Lock(); defer clockMu.Unlock(); return now }
	s, _ := store.NewInMemoryStore(store.WithClock(clock), store.WithTTL(time.Second), store.WithReapInterval(time.Hour))
	defer s.Close(ctx)
	a, b := ext.NewInstanceID(), ext.NewInstanceID()
	incA, _ := s.Put(ctx, store.NewOpID(), rec(a), 0)
	var heard []store.Removal
	snap, err := s.InstallRemovalHook(func(r store.Removal) { heard = append(heard, r) })
	if err != nil || len(snap) != 1 || snap[0].Incarnation != incA {
		t.Fatalf("snapshot %+v %v", snap, err)
	}
	incB, _ := s.Put(ctx, store.NewOpID(), rec(b), 0)
	if err := s.Remove(ctx, a, incA); err != nil || len(heard) != 1 || heard[0].Reason != store.Removed {
		t.Fatalf("remove: %v, heard %+v", err, heard)
	}
	clockMu.Lock()
	now = now.Add(2 * time.Second)
	clockMu.Unlock()
	n, _ := s.Reap(ctx)
	if n != 1 || len(heard) != 2 || heard[1].Incarnation != incB || heard[1].Reason != store.Expired {
		t.Fatalf("reap %d, heard %+v", n, heard)
	}
}
