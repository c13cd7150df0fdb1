package rdma_test

import (
	"bytes"
	"errors"
	"io"
	"testing"

	"github.com/velo-go/velo/internal/rdma"
	"github.com/velo-go/velo/metrics"
)

// StagePinned holds exactly the bytes it was given, read by a GET through
// Remote's descriptor and by ReadAt in odd-sized pieces, at sizes around
// the granule and up to several arenas' worth.
func TestStagePinnedBytesIdentical(t *testing.T) {
	r, _ := newReg(t, small())
	for i, n := range []int{1, 4095, 4096, 4097, 100_000, 3*mib + 17} {
		data := randBytes(uint64(i), n)
		s, why := r.StagePinned(data)
		if s == nil {
			t.Fatalf("StagePinned(%d): %v", n, why)
		}
		if s.Len() != n || s.InRegion() {
			t.Fatalf("Len %d InRegion %v", s.Len(), s.InRegion())
		}
		data[0] ^= 0xff // the staging is a copy
		data[0] ^= 0xff
		if got := getRemote(t, s); !bytes.Equal(got, data) {
			t.Fatalf("%d bytes: the GET read different bytes", n)
		}
		if got := readAll(t, s, 7777); !bytes.Equal(got, data) {
			t.Fatalf("%d bytes: ReadAt read different bytes", n)
		}
		p := make([]byte, 10)
		if n >= 3 {
			if k, err := s.ReadAt(p, int64(n-3)); k != 3 || err != io.EOF || !bytes.Equal(p[:3], data[n-3:]) {
				t.Fatalf("ReadAt at the tail: %d %v", k, err)
			}
		}
		if _, err := s.ReadAt(p, int64(n)); err != io.EOF {
			t.Fatalf("ReadAt at the end: %v", err)
		}
		if _, err := s.ReadAt(p, -1); !errors.Is(err, rdma.ErrBadRange) {
			t.Fatalf("ReadAt(-1): %v", err)
		}
		s.Release()
		s.Release() // idempotent
		if _, err := s.ReadAt(p, 0); !errors.Is(err, rdma.ErrReleased) {
			t.Fatalf("ReadAt after Release: %v", err)
		}
		if _, _, _, _, err := s.Remote(); !errors.Is(err, rdma.ErrReleased) {
			t.Fatalf("Remote after Release: %v", err)
		}
	}
}

// Every Remote packs a fresh key; the generation names the registration:
// the same for two stagings in one arena, new for the next arena.
func TestRemoteKeysAndGenerations(t *testing.T) {
	r, _ := newReg(t, small())
	a, _ := r.StagePinned(make([]byte, 600*kib))
	b, _ := r.StagePinned(make([]byte, 300*kib)) // same 1 MiB arena
	c, _ := r.StagePinned(make([]byte, 600*kib)) // no room: the 2 MiB arena
	_, _, ga, k1, _ := a.Remote()
	_, _, _, k2, _ := a.Remote()
	_, _, gb, _, _ := b.Remote()
	_, _, gc, _, _ := c.Remote()
	if bytes.Equal(k1, k2) {
		t.Error("two Remote calls packed the same key")
	}
	if ga != gb || gc == ga || ga == 0 {
		t.Errorf("generations a=%d b=%d c=%d", ga, gb, gc)
	}
	for _, s := range []*rdma.Staging{a, b, c} {
		s.Release()
	}
}

// Zero-length data is not staged; the reason says so (below_min), and
// nothing is mapped.
func TestStageZeroLength(t *testing.T) {
	r, b := newReg(t, small())
	for _, stage := range []func([]byte) (*rdma.Staging, metrics.RdmaPathReason){r.StagePinned, r.StageMapped} {
		if s, why := stage(nil); s != nil || why != metrics.RdmaBelowMin {
			t.Fatalf("zero length: %v %v", s, why)
		}
	}
	if b.Maps() != 0 {
		t.Fatal("zero-length staging mapped an arena")
	}
}

// StageMapped never maps: with no arena it falls back (pool_exhausted),
// after StagePinned mapped one it uses it, and when that is full or the
// data would need a dedicated arena it falls back again; the fake's map
// count does not move.
func TestStageMappedNeverMaps(t *testing.T) {
	r, b := newReg(t, small())
	if s, why := r.StageMapped(make([]byte, 10)); s != nil || why != metrics.RdmaPoolExhausted {
		t.Fatalf("no arena yet: %v %v", s, why)
	}
	if b.Maps() != 0 {
		t.Fatal("StageMapped mapped")
	}
	first, _ := r.StagePinned(make([]byte, 4*kib))
	var held []*rdma.Staging
	for {
		s, why := r.StageMapped(make([]byte, 64*kib))
		if s == nil {
			if why != metrics.RdmaPoolExhausted {
				t.Fatalf("full arena: %v", why)
			}
			break
		}
		held = append(held, s)
	}
	if len(held) != 15 || b.Maps() != 1 {
		t.Fatalf("%d stagings in the 1 MiB arena beside 4 KiB, %d maps; want 15 and 1", len(held), b.Maps())
	}
	if s, why := r.StageMapped(make([]byte, 4*mib)); s != nil || why != metrics.RdmaPoolExhausted {
		t.Fatalf("dedicated size: %v %v", s, why)
	}
	held[3].Release()
	s, why := r.StageMapped(make([]byte, 64*kib))
	if s == nil {
		t.Fatalf("after a release: %v", why)
	}
	if b.Maps() != 1 {
		t.Fatalf("maps %d", b.Maps())
	}
	s.Release()
	first.Release()
	for _, s := range held {
		s.Release()
	}
}
