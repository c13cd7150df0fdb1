package rdma_test

import (
	"strconv"
	"testing"

	"github.com/velo-go/velo/internal/rdma"
)

// BenchmarkStagePinned is one staging and its release in a warm pool
// (the copy dominates at large sizes).
func BenchmarkStagePinned(b *testing.B) {
	for _, n := range []int{4 * kib, 64 * kib, 1 * mib} {
		b.Run(strconv.Itoa(n/kib)+"KiB", func(b *testing.B) {
			r := newRegB(b)
			data := make([]byte, n)
			b.SetBytes(int64(n))
			b.ReportAllocs()
			for b.Loop() {
				s, _ := r.StagePinned(data)
				s.Release()
			}
		})
	}
}

// BenchmarkAllocDest is one destination and its release: the pool's
// bookkeeping alone.
func BenchmarkAllocDest(b *testing.B) {
	r := newRegB(b)
	b.ReportAllocs()
	for b.Loop() {
		p, _ := r.AllocDest(64 * kib)
		p.Release()
	}
}

// newRegB is a registry with its first arena mapped.
func newRegB(b *testing.B) *rdma.Registry {
	r := rdma.NewRegistry(newFake(), small(), nil)
	if s, _ := r.StagePinned([]byte{1}); s != nil {
		s.Release()
	}
	b.Cleanup(func() { _ = r.Shutdown(b.Context()) })
	return r
}
