package inlet

import (
	"strconv"
	"testing"
)

// The inlet ring keeps FIFO order across growth, including into and out
// of the pooled size, and a released array comes back empty.
func TestRingOrderAcrossGrowthAndRelease(t *testing.T) {
	var r ring
	next, want := 0, 0
	push := func(k int) {
		for range k {
			r.push([]byte(strconv.Itoa(next)))
			next++
		}
	}
	pop := func(k int) {
		for range k {
			if got := string(r.pop()); got != strconv.Itoa(want) {
				t.Fatalf("pop = %s, want %d", got, want)
			}
			want++
		}
	}
	push(3)
	pop(2) // head moves, so growth must unwrap
	push(5)
	r.reserve(pooledRingLen) // the pooled size
	if len(r.buf) != pooledRingLen {
		t.Fatalf("reserve gave %d entries, want %d", len(r.buf), pooledRingLen)
	}
	push(pooledRingLen - r.n)
	pop(10)
	push(20) // grows past the pooled size: its array goes back
	pop(r.n)
	if r.n != 0 || want != next {
		t.Fatalf("%d left, popped %d of %d", r.n, want, next)
	}

	r.reserve(pooledRingLen)
	push(4)
	r.release()
	if r.n != 0 || r.buf != nil {
		t.Fatal("release left frames")
	}
	for range 4 { // a pooled array is handed out clean
		var q ring
		q.reserve(pooledRingLen)
		for i, b := range q.buf {
			if b != nil {
				t.Fatalf("a pooled array held a frame at %d", i)
			}
		}
		q.release()
	}
}
