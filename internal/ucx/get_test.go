//go:build ucx

package ucx

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"testing"
	"unsafe"
)

// mapped maps a fresh patterned buffer on w.
func mapped(t testing.TB, w *Worker, n int) (*Mem, []byte, []byte) {
	t.Helper()
	src := pattern(n, uint64(n)+1)
	m, err := w.Map(unsafe.Pointer(unsafe.SliceData(src)), len(src))
	if err != nil {
		t.Fatal(err)
	}
	key, err := m.PackRkey()
	if err != nil {
		t.Fatal(err)
	}
	if len(key) == 0 || len(key) > MaxRkeyLen {
		t.Fatalf("packed key of %d bytes", len(key))
	}
	if err := checkRkey(key); err != nil {
		t.Fatalf("a key UCX packed fails the pre-parse: %v", err)
	}
	return m, src, key
}

func TestGetRoundTrip(t *testing.T) {
	p := newPair(t)
	for _, n := range []int{4 << 10, 1 << 20, 64 << 20} {
		t.Run(fmt.Sprint(n), func(t *testing.T) {
			m, src, key := mapped(t, p.b, n)
			dst := make([]byte, n)
			if err := p.a.Get(context.Background(), p.ab, m.Addr(), key, dst); err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(dst, src) {
				t.Fatal("GET read other bytes than the region holds")
			}
			// A GET of a slice inside the region, at an offset.
			part := make([]byte, n/4)
			if err := p.a.Get(context.Background(), p.ab, m.Addr()+uint64(n/2), key, part); err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(part, src[n/2:n/2+n/4]) {
				t.Fatal("GET at an offset read other bytes")
			}
			if err := m.Unmap(); err != nil {
				t.Fatal(err)
			}
			if _, err := m.PackRkey(); !errors.Is(err, ErrUnmapped) {
				t.Fatalf("PackRkey after Unmap: %v", err)
			}
		})
	}
	if s := p.a.Stats(); s.Inflight != 0 {
		t.Fatalf("operations left in flight: %+v", s)
	}
}

func TestEffectiveRangeCoversRegion(t *testing.T) {
	w := newWorker(t)
	buf := make([]byte, 10000)
	m, err := w.Map(unsafe.Pointer(&buf[100]), 5000)
	if err != nil {
		t.Fatal(err)
	}
	defer m.Unmap()
	base, n := m.EffectiveRange()
	lo := uintptr(unsafe.Pointer(&buf[100]))
	if base > lo || base+uintptr(n) < lo+5000 || base%4096 != 0 || n%4096 != 0 {
		t.Fatalf("effective range %#x+%d does not cover %#x+5000 in whole pages", base, n, lo)
	}
}

// TestGetRefusals: each bad GET is refused before anything is posted.
func TestGetRefusals(t *testing.T) {
	p := newPair(t)
	m, _, key := mapped(t, p.b, 4096)
	defer m.Unmap()
	ctx := context.Background()
	dst := make([]byte, 16)
	cases := []struct {
		name string
		addr uint64
		key  []byte
		dst  []byte
		want error
	}{
		{"zero length", m.Addr(), key, nil, ErrGetFailed},
		{"address zero", 0, key, dst, ErrGetFailed},
		{"range wraps", ^uint64(0) - 3, key, dst, ErrGetFailed},
		{"empty key", m.Addr(), nil, dst, ErrBadRkey},
		{"oversize key", m.Addr(), append(bytes.Clone(key), make([]byte, MaxRkeyLen)...), dst, ErrBadRkey},
		{"truncated key", m.Addr(), key[:len(key)-1], dst, ErrBadRkey},
	}
	before := p.a.Stats().Posted
	for _, c := range cases {
		err := p.a.Get(ctx, p.ab, c.addr, c.key, c.dst)
		if !errors.Is(err, c.want) {
			t.Errorf("%s: got %v, want %v", c.name, err, c.want)
		}
	}
	if s := p.a.Stats(); s.Posted != before {
		t.Fatalf("a refused GET was posted: %+v", s)
	}
	if err := p.a.Get(ctx, 999, m.Addr(), key, dst); !errors.Is(err, ErrNoEndpoint) {
		t.Fatalf("unknown endpoint: %v", err)
	}
}
