package soak

import (
	"math"
	"sync"
	"time"
)

// Hist is a latency histogram of log-spaced buckets (8 a doubling, about
// 9% wide), mergeable across processes.
type Hist struct {
	mu sync.Mutex
	B  map[int]uint64 `json:"b"`
	N  uint64         `json:"n"`
}

func bucketOf(d time.Duration) int {
	if d < time.Microsecond {
		d = time.Microsecond
	}
	return int(math.Log2(float64(d)) * 8)
}

// Add records d.
func (h *Hist) Add(d time.Duration) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.B == nil {
		h.B = map[int]uint64{}
	}
	h.B[bucketOf(d)]++
	h.N++
}

// Merge adds o into h.
func (h *Hist) Merge(o *Hist) {
	o.mu.Lock()
	b, n := make(map[int]uint64, len(o.B)), o.N
	for k, v := range o.B {
		b[k] = v
	}
	o.mu.Unlock()
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.B == nil {
		h.B = map[int]uint64{}
	}
	for k, v := range b {
		h.B[k] += v
	}
	h.N += n
}

// Take returns a copy of h and empties it.
func (h *Hist) Take() *Hist {
	h.mu.Lock()
	defer h.mu.Unlock()
	c := &Hist{B: h.B, N: h.N}
	h.B, h.N = nil, 0
	return c
}

// Quantile is the upper edge of the bucket holding quantile q; 0 when
// empty.
func (h *Hist) Quantile(q float64) time.Duration {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.N == 0 {
		return 0
	}
	lo, hi := math.MaxInt, math.MinInt
	for k := range h.B {
		lo, hi = min(lo, k), max(hi, k)
	}
	want := uint64(math.Ceil(q * float64(h.N)))
	var seen uint64
	for k := lo; k <= hi; k++ {
		seen += h.B[k]
		if seen >= want {
			return time.Duration(math.Exp2(float64(k+1) / 8))
		}
	}
	return time.Duration(math.Exp2(float64(hi+1) / 8))
}

func logf(x float64) float64 { return math.Log(x) }
