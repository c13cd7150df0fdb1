package deadline

import (
	"runtime"
	"testing"
	"time"
)

const targetEntries = 200_000

func heapInUse() uint64 {
	runtime.GC()
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return ms.HeapAlloc
}

// fill200k starts a queue holding targetEntries unattached entries, with
// distinct deadlines an hour away, and returns it with the bytes it added
// to the live heap per entry.
func fill200k(tb testing.TB, forever bool) (*Queue, float64) {
	before := heapInUse()
	q := New(0, func(uint64) {})
	at := time.Now().Add(time.Hour)
	for k := range uint64(targetEntries) {
		if forever {
			q.Add(k, Forever)
		} else {
			q.Add(k*7919, at.Add(time.Duration(k)*time.Microsecond))
		}
	}
	after := heapInUse()
	runtime.KeepAlive(q)
	return q, float64(after-before) / targetEntries
}

// 200,000 entries cost at most 100 bytes each, and one goroutine in all.
//
// The bound: each shard's map stores a 16-byte slot (8-byte key, 4-byte
// heap index, padding) at a load between 7/16 and 7/8 after growth, so 18
// to 37 bytes plus one control byte per slot; the heap stores 16 bytes
// (deadline, key) at a capacity of up to 1.25x its length once large:
// about 20 bytes. About 40 to 60 bytes in all; 100 leaves room for a map
// that has just doubled.
func TestMemoryAndGoroutinesAt200k(t *testing.T) {
	if testing.Short() {
		t.Skip("fills 200,000 entries")
	}
	sweepersGone(t) // an earlier test's sweeper may still be on its way out
	q, perEntry := fill200k(t, false)
	if n := sweepers(); n != 1 {
		t.Errorf("%d sweeper goroutines with %d entries, want 1", n, targetEntries)
	}
	if q.Len() != targetEntries {
		t.Fatalf("Len = %d", q.Len())
	}
	q.Close()
	t.Logf("%d entries with deadlines: %.1f bytes/entry", targetEntries, perEntry)
	if perEntry > 100 {
		t.Errorf("%.1f bytes per entry, want <= 100", perEntry)
	}

	q, perForever := fill200k(t, true)
	q.Close()
	t.Logf("%d Forever entries: %.1f bytes/entry", targetEntries, perForever)
	if perForever > perEntry {
		t.Errorf("a Forever entry costs %.1f bytes, more than one with a deadline (%.1f)", perForever, perEntry)
	}
}
