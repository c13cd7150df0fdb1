package deadline

import (
	"sync/atomic"
	"testing"
	"time"
)

// BenchmarkAddRemove: one anchor's life in the queue when it attaches
// before its deadline: Add, then Remove. The queue holds 200,000 other
// entries, so the heaps are as deep as at the target load.
func BenchmarkAddRemove(b *testing.B) {
	q, _ := fill200k(b, false)
	defer q.Close()
	at := time.Now().Add(2 * time.Hour)
	b.ReportAllocs()
	b.ResetTimer()
	k := uint64(1) << 40
	for i := 0; b.Loop(); i++ {
		q.Add(k, at.Add(time.Duration(i)))
		q.Remove(k)
		k++
	}
}

// BenchmarkAddRemoveParallel: the same from every P at once.
func BenchmarkAddRemoveParallel(b *testing.B) {
	q, _ := fill200k(b, false)
	defer q.Close()
	at := time.Now().Add(2 * time.Hour)
	var next atomic.Uint64
	next.Store(1 << 40)
	b.ReportAllocs()
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		k := next.Add(1 << 32)
		for pb.Next() {
			q.Add(k, at)
			q.Remove(k)
			k++
		}
	})
}

// BenchmarkAdd200k fills a new queue with 200,000 entries per op; ns/entry
// and B/entry are reported as metrics.
func BenchmarkAdd200k(b *testing.B) {
	b.ReportAllocs()
	var perEntry float64
	for b.Loop() {
		q := New(0, func(uint64) {})
		at := time.Now().Add(time.Hour)
		for k := range uint64(targetEntries) {
			q.Add(k*7919, at.Add(time.Duration(k)*time.Microsecond))
		}
		q.Close()
	}
	b.StopTimer()
	q, perEntry := fill200k(b, false)
	q.Close()
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/targetEntries, "ns/entry")
	b.ReportMetric(perEntry, "B/entry-live")
}

// BenchmarkRemoveOldest: anchors attach in the order they were made, so
// the entry an attach removes is the oldest, at the top of its heap, and
// the one moved into its place sifts down the whole depth. The queue holds
// 40,000 entries (an anchor host with that many requests waiting); each op
// removes the oldest and adds a new one.
func BenchmarkRemoveOldest(b *testing.B) {
	const n = 40_000
	q := New(0, func(uint64) {})
	defer q.Close()
	at := time.Now().Add(2 * time.Hour)
	for k := range uint64(n) {
		q.Add(k, at.Add(time.Duration(k)))
	}
	b.ReportAllocs()
	b.ResetTimer()
	for k := uint64(0); b.Loop(); k++ {
		q.Remove(k)
		q.Add(k+n, at.Add(time.Duration(k+n)))
	}
}
