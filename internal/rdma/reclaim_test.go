package rdma_test

import (
	"slices"
	"testing"
	"testing/synctest"
	"time"

	"github.com/velo-go/velo/internal/rdma"
)

func reclaimCfg() rdma.Config {
	cfg := small()
	cfg.Pool.MaxArenaBytes = 4 * mib
	cfg.Pool.ArenaReclaimAfter = time.Second
	cfg.Pool.RetainArenaBytes = 1 * mib
	return cfg
}

// fill maps the 1, 2 and 4 MiB arenas with seven 1 MiB destinations.
func fill(t *testing.T, r *rdma.Registry) []*rdma.PinnedBuf {
	t.Helper()
	var ps []*rdma.PinnedBuf
	for range 7 {
		p, err := r.AllocDest(1 * mib)
		if err != nil {
			t.Fatal(err)
		}
		ps = append(ps, p)
	}
	if got := r.Stats().PooledArenas; !slices.Equal(got, []int64{1 * mib, 2 * mib, 4 * mib}) {
		t.Fatalf("arenas %v", got)
	}
	return ps
}

// Empty pooled arenas are unmapped ArenaReclaimAfter after they emptied,
// newest first, down to RetainArenaBytes: the small first arena stays.
// The timer exists only while something could be reclaimed.
func TestReclaimEmptyArenas(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r, b := newReg(t, reclaimCfg())
		ps := fill(t, r)
		if rdma.ReclaimArmed(r) {
			t.Fatal("timer armed with every arena busy")
		}
		for _, p := range ps {
			p.Release()
		}
		if !rdma.ReclaimArmed(r) {
			t.Fatal("timer not armed with empty arenas above the floor")
		}
		time.Sleep(time.Second - time.Millisecond)
		synctest.Wait()
		if b.Unmaps() != 0 {
			t.Fatal("reclaimed before ArenaReclaimAfter")
		}
		time.Sleep(time.Millisecond)
		synctest.Wait()
		if got := r.Stats().PooledArenas; !slices.Equal(got, []int64{1 * mib}) || b.Unmaps() != 2 {
			t.Fatalf("after reclamation: arenas %v, unmaps %d", got, b.Unmaps())
		}
		if rdma.ReclaimArmed(r) {
			t.Fatal("timer still armed with only the floor left")
		}
		// Growth starts again from the retained arena.
		p1, _ := r.AllocDest(1 * mib)
		p2, _ := r.AllocDest(1 * mib)
		if got := r.Stats().PooledArenas; !slices.Equal(got, []int64{1 * mib, 2 * mib}) {
			t.Fatalf("regrown arenas %v", got)
		}
		p1.Release()
		p2.Release()
	})
}

// An arena taken again before it is due is not reclaimed, and the timer
// goes away once nothing empty is left; an arena with an allocation is
// never reclaimed, however long it stays.
func TestReclaimSparesBusyArenas(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r, b := newReg(t, reclaimCfg())
		ps := fill(t, r)
		for _, p := range ps[3:] { // the four in the 4 MiB arena
			p.Release()
		}
		if !rdma.ReclaimArmed(r) {
			t.Fatal("not armed")
		}
		time.Sleep(500 * time.Millisecond)
		again, err := r.AllocDest(1 * mib) // fits the empty 4 MiB arena
		if err != nil {
			t.Fatal(err)
		}
		if rdma.ReclaimArmed(r) {
			t.Fatal("timer armed with nothing empty")
		}
		time.Sleep(time.Hour)
		synctest.Wait()
		if b.Unmaps() != 0 {
			t.Fatalf("%d busy arenas unmapped", b.Unmaps())
		}
		again.Release()
		for _, p := range ps[:3] {
			p.Release()
		}
	})
}
