package rdma_test

import (
	"bytes"
	"context"
	"errors"
	"slices"
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/velo-go/velo/internal/rdma"
	"github.com/velo-go/velo/internal/rdma/rdmatest"
	"github.com/velo-go/velo/metrics"
)

// With the book's defaults the pooled arenas grow 64, 128, 256, 512 MiB;
// the next (1 GiB) would pass the 1 GiB budget, so it halves to 64 MiB,
// which fills the budget exactly; one more request is refused for the
// budget. AllocDest touches no page, so this costs only address space.
func TestPoolGrowthSequence(t *testing.T) {
	r, b := newReg(t, rdma.Config{})
	const req = 64*mib - 4*kib // the largest pooled request
	var held []*rdma.PinnedBuf
	for range 1 + 2 + 4 + 8 + 1 {
		p, err := r.AllocDest(req)
		if err != nil {
			t.Fatalf("AllocDest %d: %v", len(held), err)
		}
		held = append(held, p)
	}
	want := []int64{64 * mib, 128 * mib, 256 * mib, 512 * mib, 64 * mib}
	if got := r.Stats().PooledArenas; !slices.Equal(got, want) {
		t.Fatalf("arenas %v MiB, want %v", mibs(got), mibs(want))
	}
	if b.Maps() != 5 || r.Stats().RegisteredBytes != 1<<30 {
		t.Fatalf("maps %d registered %d", b.Maps(), r.Stats().RegisteredBytes)
	}
	if _, err := r.AllocDest(req); !errors.Is(err, rdma.ErrBudget) {
		t.Fatalf("past the budget: %v", err)
	}
	if s, why := r.StagePinned([]byte{1}); s == nil {
		t.Fatalf("a granule left in a pooled arena: %v", why)
	} else {
		s.Release()
	}
	for _, p := range held {
		p.Release()
	}
}

func mibs(v []int64) []int64 {
	out := make([]int64, len(v))
	for i, x := range v {
		out[i] = x / mib
	}
	return out
}

// A request of DedicatedArenaMin or more gets its own arena, unmapped as
// soon as it is released: 20 stage/release cycles of 64 MiB under the
// default 1 GiB budget never run out (without the unmap, the 16th would).
func TestDedicatedArenaUnmappedOnRelease(t *testing.T) {
	r, b := newReg(t, rdma.Config{})
	data := pattern(7, 64*mib)
	for i := range 20 {
		s, why := r.StagePinned(data)
		if s == nil {
			t.Fatalf("cycle %d: %v", i, why)
		}
		if st := r.Stats(); st.DedicatedArenas != 1 || len(st.PooledArenas) != 0 {
			t.Fatalf("cycle %d: %+v", i, st)
		}
		if i == 0 && !bytes.Equal(getRemote(t, s), data) {
			t.Fatal("dedicated staging: the GET read different bytes")
		}
		s.Release()
		if b.LiveMappings() != 0 || r.Stats().RegisteredBytes != 0 {
			t.Fatalf("cycle %d: %d live mappings, %d bytes after release", i, b.LiveMappings(), r.Stats().RegisteredBytes)
		}
	}
	if b.Maps() != 20 || b.Unmaps() != 20 {
		t.Fatalf("maps %d unmaps %d", b.Maps(), b.Unmaps())
	}
}

// Over the budget, pinned staging falls back with reason budget, and the
// budget counts external regions too (whole pages of them). A map the
// backend refuses falls back with pool_exhausted and gives the
// reservation back.
func TestBudgetFallback(t *testing.T) {
	cfg := small()
	cfg.Pool.RegisteredBytesBudget = 4 * mib
	cfg.Pool.MaxArenaBytes = 1 * mib
	r, b := newReg(t, cfg)

	g, err := r.RegisterOwned(make([]byte, 2*mib+1)) // 2 MiB + a page
	if err != nil {
		t.Fatal(err)
	}
	if got := r.Stats().RegisteredBytes; got != 2*mib+4*kib {
		t.Fatalf("registered %d after an external region, want whole pages", got)
	}
	s1, why := r.StagePinned(make([]byte, 512*kib)) // maps the 1 MiB arena: 3 MiB + a page
	if s1 == nil {
		t.Fatal(why)
	}
	s2, why := r.StagePinned(make([]byte, 768*kib)) // a second 1 MiB arena would pass 4 MiB
	if s2 != nil || why != metrics.RdmaBudget {
		t.Fatalf("over budget: %v %v", s2, why)
	}
	_, err = r.RegisterOwned(make([]byte, 1*mib))
	if !errors.Is(err, rdma.ErrBudget) {
		t.Fatalf("external over budget: %v", err)
	}
	if _, err := g.Unregister(0); err != nil {
		t.Fatal(err)
	}
	b.FailMaps(1)
	if s, why := r.StagePinned(make([]byte, 768*kib)); s != nil || why != metrics.RdmaPoolExhausted {
		t.Fatalf("refused map: %v %v", s, why)
	}
	s2, why = r.StagePinned(make([]byte, 768*kib)) // the refused map gave its reservation back
	if s2 == nil {
		t.Fatal(why)
	}
	s1.Release()
	s2.Release()
}

// A refused unmap leaks: the arena stays counted and mapped and its pages
// are not freed, Shutdown reports it, and AfterBackendClose settles it.
func TestRefusedUnmapLeaks(t *testing.T) {
	r, b := newReg(t, small())
	s, _ := r.StagePinned(make([]byte, 4*mib)) // dedicated
	b.FailUnmaps(1)
	s.Release()
	if b.LiveMappings() != 1 || r.Stats().Mappings != 1 || r.Stats().RegisteredBytes != 4*mib {
		t.Fatalf("after a refused unmap: live %d, %+v", b.LiveMappings(), r.Stats())
	}
	if r.AfterBackendClose() {
		t.Fatal("AfterBackendClose before Shutdown did something")
	}
	if err := r.Shutdown(context.Background()); err != nil {
		t.Fatalf("Shutdown: %v", err) // the refusal was at Release, not in the sweep
	}
	if !r.AfterBackendClose() || r.Stats().Mappings != 0 || r.Stats().RegisteredBytes != 0 {
		t.Fatalf("after AfterBackendClose: %+v", r.Stats())
	}
}

// The registry records velo_rdma_registrations_total by kind, the
// registered bytes and the live regions, and both gauges fall to zero at
// Shutdown.
func TestRegistryMetrics(t *testing.T) {
	preg := prometheus.NewRegistry()
	vm, err := metrics.Register(preg)
	if err != nil {
		t.Fatal(err)
	}
	b := rdmatest.New()
	r := rdma.NewRegistry(b, small(), vm.Rendezvous())
	s, _ := r.StagePinned(make([]byte, 10))
	g, err := r.RegisterOwned(make([]byte, 5*kib))
	if err != nil {
		t.Fatal(err)
	}
	gauge := func(name string) float64 { return gathered(t, preg, name, "") }
	regs := func(kind string) float64 { return gathered(t, preg, "velo_rdma_registrations_total", kind) }
	if regs("arena") != 1 || regs("external") != 1 {
		t.Errorf("registrations arena=%v external=%v", regs("arena"), regs("external"))
	}
	_, pinned := g.EffectiveRange()
	if got, want := gauge("velo_rdma_registered_bytes"), float64(1*mib+pinned); got != want {
		t.Errorf("registered bytes %v, want %v", got, want)
	}
	if got := gauge("velo_rdma_live_regions"); got != 2 {
		t.Errorf("live regions %v", got)
	}
	s.Release()
	if err := r.Shutdown(context.Background()); err != nil {
		t.Fatal(err)
	}
	if gauge("velo_rdma_registered_bytes") != 0 || gauge("velo_rdma_live_regions") != 0 {
		t.Error("gauges not zero after Shutdown")
	}
}

// gathered is the value of the series of family name whose one label
// value is lv (any series when lv is "").
func gathered(t *testing.T, reg *prometheus.Registry, name, lv string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		for _, m := range mf.GetMetric() {
			if lv != "" && m.GetLabel()[0].GetValue() != lv {
				continue
			}
			if c := m.GetCounter(); c != nil {
				return c.GetValue()
			}
			return m.GetGauge().GetValue()
		}
	}
	t.Fatalf("%s{%s} not gathered", name, lv)
	return 0
}
