//go:build ucx

package ucx

import (
	"bytes"
	"context"
	"fmt"
	"testing"
	"unsafe"
)

// Memory UCX allocated is readable by a peer's GET like mapped memory,
// whatever the transport, and Base is where it lies.
func TestAllocGetRoundTrip(t *testing.T) {
	p := newPair(t)
	for _, n := range []int{4 << 10, 1 << 20, 16 << 20} {
		t.Run(fmt.Sprint(n), func(t *testing.T) {
			m, err := p.b.Alloc(n)
			if err != nil {
				t.Fatal(err)
			}
			if m.Base() == nil || m.Len() != n || m.Addr() != uint64(uintptr(m.Base())) {
				t.Fatalf("Alloc(%d): base %p, len %d, addr %#x", n, m.Base(), m.Len(), m.Addr())
			}
			src := unsafe.Slice((*byte)(m.Base()), n)
			copy(src, pattern(n, 7))
			key, err := m.PackRkey()
			if err != nil {
				t.Fatal(err)
			}
			dst := make([]byte, n)
			if err := p.a.Get(context.Background(), p.ab, m.Addr(), key, dst); err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(dst, src) {
				t.Fatal("GET read other bytes than the allocation holds")
			}
			if err := m.Unmap(); err != nil {
				t.Fatal(err)
			}
		})
	}
}
