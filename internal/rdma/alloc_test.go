package rdma_test

import (
	"bytes"
	"context"
	"testing"

	"github.com/velo-go/velo/internal/rdma"
	"github.com/velo-go/velo/internal/rdma/rdmatest"
)

// newAllocReg builds a registry over a fake that allocates its arenas
// (rdma.Allocator), as UCX does.
func newAllocReg(t *testing.T, cfg rdma.Config) (*rdma.Registry, *rdmatest.Backend) {
	t.Helper()
	if cfg.Log == nil {
		cfg.Log = quietLog()
	}
	b := rdmatest.New()
	r := rdma.NewRegistry(rdmatest.Allocating{Backend: b}, cfg, nil)
	t.Cleanup(func() { _ = r.Shutdown(context.Background()) })
	return r, b
}

// Arenas the backend allocates serve stagings and GETs like mmapped ones,
// and a dedicated one is unmapped (and so freed) at its release.
func TestAllocatedArenasStageAndRetire(t *testing.T) {
	r, b := newAllocReg(t, small())
	data := pattern(21, 300*1024)
	s, why := r.StagePinned(data)
	if s == nil {
		t.Fatal(why)
	}
	if got := getRemote(t, s); !bytes.Equal(got, data) {
		t.Fatal("a GET of an allocated arena read different bytes")
	}
	big := pattern(22, int(small().Pool.DedicatedArenaMin))
	d, why := r.StagePinned(big)
	if d == nil {
		t.Fatal(why)
	}
	maps := b.LiveMappings()
	d.Release()
	if got := b.LiveMappings(); got != maps-1 {
		t.Fatalf("%d mappings after releasing the dedicated staging, want %d", got, maps-1)
	}
	s.Release()
}

// An arena the backend allocated is freed by its unmap, so the shutdown
// sweep must not unmap it under a GET destination still held: the unmap
// waits for the destination's release. (Freed memory is munmapped by the
// fake: a write after it would fault.)
func TestShutdownDefersTheUnmapOfAnAllocatedArenaInUse(t *testing.T) {
	r, b := newAllocReg(t, small())
	dst, err := r.AllocDest(64 * 1024)
	if err != nil {
		t.Fatal(err)
	}
	if err := r.Shutdown(context.Background()); err != nil {
		t.Fatal(err)
	}
	if got := b.LiveMappings(); got != 1 {
		t.Fatalf("%d live mappings after the sweep, want the one under the destination", got)
	}
	buf := dst.Bytes()
	for i := range buf { // a GET still landing: the memory must be there
		buf[i] = byte(i)
	}
	dst.Release()
	if got := b.LiveMappings(); got != 0 {
		t.Fatalf("%d live mappings after the destination's release, want 0", got)
	}
}
