package store_test

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/velo-go/velo/ext"
	"github.com/velo-go/velo/hub/store"
)

func filled(tb testing.TB, n int) *store.InMemoryStore {
	tb.Helper()
	s, err := store.NewInMemoryStore()
	if err != nil {
		tb.Fatal(err)
	}
	for range n {
		if _, err := s.Put(context.Background(), store.NewOpID(), rec(ext.NewInstanceID()), 0); err != nil {
			tb.Fatal(err)
		}
	}
	return s
}

// putRemove writes a new entry and removes it: the steady state of a hub
// whose registrants come and go.
func putRemove(tb testing.TB, s *store.InMemoryStore, r store.Record) {
	ctx := context.Background()
	inc, err := s.Put(ctx, store.NewOpID(), r, 0)
	if err != nil {
		tb.Fatal(err)
	}
	if err := s.Remove(ctx, r.Peer.InstanceID, inc); err != nil {
		tb.Fatal(err)
	}
}

// TestWriteCostIndependentOfEntries: a put and a remove allocate the same
// at 100 entries and at 10,000. An index update that walked the entries
// (copying a sorted list, rebuilding a slice) would allocate in proportion
// to them.
func TestWriteCostIndependentOfEntries(t *testing.T) {
	allocs := func(n int) float64 {
		s := filled(t, n)
		defer s.Close(context.Background())
		if _, err := s.InstallRemovalHook(func(store.Removal) {}); err != nil {
			t.Fatal(err)
		}
		r := rec(ext.NewInstanceID())
		putRemove(t, s, r) // warm the shard's map
		return testing.AllocsPerRun(200, func() { putRemove(t, s, r) })
	}
	small, large := allocs(100), allocs(10_000)
	// And no write walks the entries: the view counts every item a scan
	// visits.
	s := filled(t, 10_000)
	defer s.Close(context.Background())
	before := store.ViewVisits(s)
	r := rec(ext.NewInstanceID())
	for range 100 {
		putRemove(t, s, r)
		_ = s.Touch(r.Peer.InstanceID, 1)
		s.LookupInstance(r.Peer.InstanceID)
	}
	if v := store.ViewVisits(s) - before; v != 0 {
		t.Fatalf("100 puts, removes, touches and lookups visited %d entries", v)
	}
	if small != large {
		t.Fatalf("put+remove allocates %.1f at 100 entries, %.1f at 10,000", small, large)
	}
	t.Logf("put+remove: %.0f allocs at 100 and at 10,000 entries", small)
}

// TestTouchDoesNotAllocate: a touch is a lookup and an atomic store.
func TestTouchDoesNotAllocate(t *testing.T) {
	s := filled(t, 1000)
	defer s.Close(context.Background())
	id := ext.NewInstanceID()
	inc, _ := s.Put(context.Background(), store.NewOpID(), rec(id), 0)
	if a := testing.AllocsPerRun(1000, func() { _ = s.Touch(id, inc) }); a != 0 {
		t.Fatalf("touch allocates %.1f", a)
	}
	if a := testing.AllocsPerRun(1000, func() { s.LookupWorker(id.WorkerID()) }); a != 0 {
		t.Fatalf("worker lookup allocates %.1f", a)
	}
}

func BenchmarkPut(b *testing.B) {
	for _, n := range []int{100, 10_000} {
		b.Run(fmt.Sprintf("entries=%d", n), func(b *testing.B) {
			s := filled(b, n)
			defer s.Close(context.Background())
			ctx := context.Background()
			r := rec(ext.NewInstanceID())
			var inc store.Incarnation
			b.ReportAllocs()
			for b.Loop() {
				var err error
				if inc, err = s.Put(ctx, store.NewOpID(), r, inc); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

func BenchmarkPutRemove(b *testing.B) {
	for _, n := range []int{100, 10_000} {
		b.Run(fmt.Sprintf("entries=%d", n), func(b *testing.B) {
			s := filled(b, n)
			defer s.Close(context.Background())
			r := rec(ext.NewInstanceID())
			b.ReportAllocs()
			for b.Loop() {
				putRemove(b, s, r)
			}
		})
	}
}

func BenchmarkTouch(b *testing.B) {
	s := filled(b, 10_000)
	defer s.Close(context.Background())
	id := ext.NewInstanceID()
	inc, _ := s.Put(context.Background(), store.NewOpID(), rec(id), 0)
	b.ReportAllocs()
	for b.Loop() {
		_ = s.Touch(id, inc)
	}
}

// BenchmarkReap expires 10,000 entries in one pass.
func BenchmarkReap(b *testing.B) {
	ctx := context.Background()
	for b.Loop() {
		b.StopTimer()
		var now atomic.Int64
		s, _ := store.NewInMemoryStore(store.WithClock(func() time.Time { return time.Unix(0, now.Load()) }))
		for range 10_000 {
			_, _ = s.Put(ctx, store.NewOpID(), rec(ext.NewInstanceID()), 0)
		}
		now.Store(int64(time.Hour))
		b.StartTimer()
		if n, err := s.Reap(ctx); err != nil || n != 10_000 {
			b.Fatalf("reaped %d: %v", n, err)
		}
		b.StopTimer()
		_ = s.Close(ctx)
		b.StartTimer()
	}
}
