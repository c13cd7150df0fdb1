package rdma_test

import (
	"bytes"
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/velo-go/velo/internal/rdma"
	"github.com/velo-go/velo/internal/testwait"
	"github.com/velo-go/velo/metrics"
)

// Many goroutines stage (pinned, mapped, dedicated, in a region), register
// and allocate while Shutdown runs. Nothing whose call began after the
// gate (Draining true) succeeds; the moment Shutdown returns the backend
// holds no mapping, and still none once the stagers stop; every staging
// that did succeed has lost its key but still reads its own bytes, and
// releases cleanly afterwards.
func TestShutdownGateRace(t *testing.T) {
	cfg := small()
	cfg.Pool.RegisteredBytesBudget = 256 * mib
	r, b := newReg(t, cfg)
	g, err := r.RegisterOwned(randBytes(9, 256*kib))
	if err != nil {
		t.Fatal(err)
	}

	type held struct {
		s    *rdma.Staging
		want []byte
	}
	var (
		mu       sync.Mutex
		kept     []held
		afterWin atomic.Int64 // successes whose call began after the gate
		stop     = make(chan struct{})
		wg       sync.WaitGroup
		started  sync.WaitGroup
	)
	worker := func(id int) {
		defer wg.Done()
		data := pattern(uint64(id), 5*mib)
		for i := 0; ; i++ {
			if i == 3 {
				started.Done()
			}
			select {
			case <-stop:
				return
			default:
			}
			gated := r.Draining()
			size := []int{100, 70 * kib, 300 * kib, 5 * mib}[(id+i)%4]
			var s *rdma.Staging
			var ok bool
			switch (id + i) % 5 {
			case 0, 1:
				s, _ = r.StagePinned(data[:size])
			case 2:
				s, _ = r.StageMapped(data[:size])
			case 3:
				s, _ = r.StageInRegion(g, i%1000, 1000)
				if s != nil {
					s.Release() // a held region staging would hold up the drain
					s = nil
					ok = true
				}
			case 4:
				if p, err := r.AllocDest(size); err == nil {
					p.Release()
					ok = true
				}
			}
			if s != nil || ok {
				if gated {
					afterWin.Add(1)
				}
			}
			if s != nil {
				if i%3 == 0 {
					s.Release()
					continue
				}
				mu.Lock()
				kept = append(kept, held{s, data[:size]})
				mu.Unlock()
			}
		}
	}
	const workers = 8
	wg.Add(workers)
	started.Add(workers)
	for id := range workers {
		go worker(id)
	}
	started.Wait()
	if err := r.Shutdown(context.Background()); err != nil {
		t.Fatalf("Shutdown: %v", err)
	}
	if n := b.LiveMappings(); n != 0 {
		t.Fatalf("%d mappings live when Shutdown returned", n)
	}
	close(stop)
	wg.Wait()
	if n := b.LiveMappings(); n != 0 || r.Stats().Mappings != 0 {
		t.Fatalf("%d mappings live after the stagers stopped (%+v)", n, r.Stats())
	}
	if n := afterWin.Load(); n != 0 {
		t.Fatalf("%d stagings or allocations succeeded after the gate", n)
	}
	if len(kept) == 0 {
		t.Fatal("no staging succeeded at all: the race was not run")
	}
	for _, h := range kept {
		if _, _, _, _, err := h.s.Remote(); !errors.Is(err, rdma.ErrDeregistered) {
			t.Fatalf("Remote after Shutdown: %v", err)
		}
		p := make([]byte, len(h.want))
		if n, _ := h.s.ReadAt(p, 0); n != len(p) || !bytes.Equal(p, h.want) {
			t.Fatal("a staging's bytes changed across Shutdown")
		}
		h.s.Release()
	}
	<-g.Deregistered()
	if r.Stats().RegisteredBytes != 0 {
		t.Fatalf("registered bytes %d after Shutdown", r.Stats().RegisteredBytes)
	}
}

// After Shutdown everything is refused with the shutdown reason, and a
// second Shutdown returns at once with the first one's result.
func TestShutdownRefusesAndIsIdempotent(t *testing.T) {
	r, b := newReg(t, small())
	s, _ := r.StagePinned([]byte("x"))
	if err := r.Shutdown(context.Background()); err != nil {
		t.Fatal(err)
	}
	if !r.Draining() {
		t.Fatal("not Draining after Shutdown")
	}
	if err := r.Shutdown(context.Background()); err != nil {
		t.Fatal(err)
	}
	if s, why := r.StagePinned([]byte("x")); s != nil || why != metrics.RdmaDraining {
		t.Fatalf("StagePinned: %v %v", s, why)
	}
	if _, err := r.AllocDest(10); !errors.Is(err, rdma.ErrShutdown) {
		t.Fatalf("AllocDest: %v", err)
	}
	if _, err := r.RegisterOwned(make([]byte, 10)); !errors.Is(err, rdma.ErrShutdown) {
		t.Fatalf("RegisterOwned: %v", err)
	}
	s.Release() // after the sweep: frees the arena's pages
	if b.Maps() != 1 || b.Unmaps() != 1 {
		t.Fatalf("maps %d unmaps %d", b.Maps(), b.Unmaps())
	}
}

// A region staging that is never released holds the drain until
// ShutdownTimeout; then Shutdown forces: it unmaps, closes Deregistered,
// reports the cut-short drain (DeadlineExceeded), and a concurrent
// Unregister waiting on the region returns DrainTimedOut.
func TestShutdownForcedDrain(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		cfg := small()
		cfg.ShutdownTimeout = 3 * time.Second
		r, b := newReg(t, cfg)
		g, _ := r.RegisterOwned(make([]byte, 100))
		s, _ := r.StageInRegion(g, 0, 10)
		unreg := make(chan rdma.DrainResult, 1)
		go func() {
			res, _ := g.Unregister(time.Hour)
			unreg <- res
		}()
		synctest.Wait()
		start := time.Now()
		err := r.Shutdown(context.Background())
		if !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("Shutdown: %v", err)
		}
		if d := time.Since(start); d != 3*time.Second {
			t.Fatalf("Shutdown took %v, want the timeout", d)
		}
		if res := <-unreg; res != rdma.DrainTimedOut {
			t.Fatalf("Unregister: %v", res)
		}
		<-g.Deregistered()
		if b.LiveMappings() != 0 {
			t.Fatal("mapped after a forced Shutdown")
		}
		s.Release()
	})
}

// Releases racing the sweep (pool and dedicated stagings, destinations)
// are safe, and every page ends unmapped.
func TestReleaseRacesShutdown(t *testing.T) {
	for range 20 {
		r, b := newReg(t, small())
		var ss []*rdma.Staging
		var ps []*rdma.PinnedBuf
		for i := range 20 {
			s, _ := r.StagePinned(make([]byte, []int{10, 200 * kib}[i%2]))
			ss = append(ss, s)
			p, _ := r.AllocDest([]int{1000, 4 * mib}[i%2]) // dedicated without touching its pages
			ps = append(ps, p)
		}
		var wg sync.WaitGroup
		wg.Go(func() {
			for _, s := range ss {
				s.Release()
			}
		})
		wg.Go(func() {
			for _, p := range ps {
				p.Release()
			}
		})
		if err := r.Shutdown(context.Background()); err != nil {
			t.Fatal(err)
		}
		wg.Wait()
		if b.LiveMappings() != 0 {
			t.Fatal("mapped after Shutdown")
		}
	}
}

// Shutdown's drain waits for a registration in progress (a staging whose
// map is under way), refuses new ones meanwhile, and then sweeps the
// arena that map produced: the admitted staging succeeds but has lost its
// key, and nothing stays mapped.
func TestShutdownWaitsForMapInProgress(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r, b := newReg(t, small())
		proceed := make(chan struct{})
		b.OnMap(func() { <-proceed })
		staged := make(chan *rdma.Staging, 1)
		go func() {
			s, _ := r.StagePinned([]byte("admitted before the gate"))
			staged <- s
		}()
		synctest.Wait() // parked in Map
		done := make(chan error, 1)
		go func() { done <- r.Shutdown(context.Background()) }()
		synctest.Wait()
		select {
		case err := <-done:
			t.Fatalf("Shutdown returned (%v) with a map in progress", err)
		default:
		}
		if s, why := r.StagePinned([]byte("late")); s != nil || why != metrics.RdmaDraining {
			t.Fatalf("a staging during the drain: %v %v", s, why)
		}
		close(proceed)
		if err := <-done; err != nil {
			t.Fatalf("Shutdown: %v", err)
		}
		if b.LiveMappings() != 0 {
			t.Fatal("the arena mapped during the drain was not swept")
		}
		s := <-staged
		if s == nil {
			t.Fatal("the admitted staging failed")
		}
		if _, _, _, _, err := s.Remote(); !errors.Is(err, rdma.ErrDeregistered) {
			t.Fatalf("Remote: %v", err)
		}
		s.Release()
	})
}

// When the drain runs out while a map is still in progress, the sweep
// goes ahead; the map that finishes afterwards finds the registry swept,
// unmaps its arena at once and fails its staging (draining). Nothing is
// left mapped with no tracking entry.
func TestMapFinishingAfterForcedSweep(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		cfg := small()
		cfg.ShutdownTimeout = time.Second
		r, b := newReg(t, cfg)
		proceed := make(chan struct{})
		b.OnMap(func() { <-proceed })
		type res struct {
			s   *rdma.Staging
			why metrics.RdmaPathReason
		}
		staged := make(chan res, 1)
		go func() {
			s, why := r.StagePinned([]byte("straggler"))
			staged <- res{s, why}
		}()
		synctest.Wait()
		if err := r.Shutdown(context.Background()); !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("Shutdown: %v", err)
		}
		close(proceed)
		got := <-staged
		if got.s != nil || got.why != metrics.RdmaDraining {
			t.Fatalf("straggler: %v %v", got.s, got.why)
		}
		if b.LiveMappings() != 0 || b.Maps() != 1 || r.Stats().RegisteredBytes != 0 {
			t.Fatalf("live %d maps %d, %+v", b.LiveMappings(), b.Maps(), r.Stats())
		}
	})
}

// A region whose own Unregister gave up on a held staging does not hold
// Shutdown's drain: once it is unregistered, the drain moves on.
func TestShutdownSkipsRegionUnregisteredMeanwhile(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		cfg := small()
		cfg.ShutdownTimeout = time.Hour
		r, _ := newReg(t, cfg)
		g, _ := r.RegisterOwned(make([]byte, 100))
		s, _ := r.StageInRegion(g, 0, 10)
		unreg := make(chan rdma.DrainResult, 1)
		go func() {
			res, _ := g.Unregister(time.Second)
			unreg <- res
		}()
		synctest.Wait()
		start := time.Now()
		if err := r.Shutdown(context.Background()); err != nil {
			t.Fatalf("Shutdown: %v", err)
		}
		if d := time.Since(start); d > time.Second {
			t.Fatalf("Shutdown waited %v for a region already unregistered", d)
		}
		if res := <-unreg; res != rdma.DrainTimedOut {
			t.Fatalf("Unregister: %v", res)
		}
		s.Release()
	})
}

// An unmap that waits (a backend's own GET into the memory, unanswered
// until its transport closes) does not hold the sweep past its ctx:
// Shutdown returns with an error that says so, and the unmap finishes
// when the backend lets it go.
func TestShutdownDoesNotWaitPastItsContextForAnUnmap(t *testing.T) {
	r, b := newReg(t, small())
	s, why := r.StagePinned(pattern(31, 64*1024))
	if s == nil {
		t.Fatal(why)
	}
	s.Release()
	release := b.HoldUnmaps()
	defer release()
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	err := r.Shutdown(ctx)
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Shutdown with an unmap held: %v, want DeadlineExceeded", err)
	}
	if b.LiveMappings() != 1 {
		t.Fatalf("%d live mappings while the unmap is held, want 1", b.LiveMappings())
	}
	release()
	testwait.Until(t, "the held unmap to finish", func() bool { return b.LiveMappings() == 0 })
}
