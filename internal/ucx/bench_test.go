//go:build ucx

package ucx

import (
	"context"
	"fmt"
	"testing"
)

// BenchmarkGet: one GET at a time between two workers of this process,
// of a mapped Go buffer into a Go slice. Run it over shared memory with
// UCX_TLS=sm,self go test -tags ucx -run '^$' -bench Get ./internal/ucx/
// (MB/s is 10^6 bytes a second).
func BenchmarkGet(b *testing.B) {
	p := newPair(b)
	for _, n := range []int{1 << 20, 64 << 20} {
		b.Run(fmt.Sprintf("%dMiB", n>>20), func(b *testing.B) {
			m, _, key := mapped(b, p.b, n)
			defer m.Unmap()
			dst := make([]byte, n)
			ctx := context.Background()
			b.SetBytes(int64(n))
			b.ResetTimer()
			for b.Loop() {
				if err := p.a.Get(ctx, p.ab, m.Addr(), key, dst); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
