package streaming

import (
	"testing"
	"time"

	"github.com/velo-go/velo/internal/testwait"
	"github.com/velo-go/velo/metrics"
	"github.com/velo-go/velo/streaming/internal/mux"
)

// wakesBy reads the per-source wake counts of a mux.
func wakesBy(mx *mux.Mux) (out [metrics.NumMuxWakeSources]uint64) {
	for i := range out {
		out[i] = mx.N.WakesBy[i].Load()
	}
	return out
}

// settled waits until the producer's batcher sleeps and every credit the
// consumer sent has reached it, so that nothing but the next call of the
// test can signal the batcher.
func settled(t *testing.T, b *mux.Batcher, pm, cm *mux.Mux, minCredit uint64) {
	t.Helper()
	testwait.Until(t, "the batcher asleep, its credit home", func() bool {
		sent := cm.N.CreditSent.Load()
		if sent < minCredit || pm.N.CreditReceived.Load() != sent {
			return false
		}
		b.Mu.Lock()
		defer b.Mu.Unlock()
		return !b.Awake && len(b.Wake) == 0
	})
}

// The batcher's wakes are counted by what woke it: a Send on a sleeping
// batcher is a frame wake, a Finalize a departed one, and the scrape
// carries both under source=. The total of the sources is the unlabelled
// count that MuxStats reports.
func TestMuxBatcherWakesBySource(t *testing.T) {
	reg, vm := newMetrics(t)
	producer, consumer := muxNodes(t, MuxConfig{CreditSweepInterval: time.Minute}, WithMetrics(vm))
	a, s := muxStream(t, producer, consumer)
	pm, cm := muxOf(t, producer), muxOf(t, consumer)
	fill(t, s, 0, 1)
	readTokens(t, a, 0, 1, 5*time.Second)
	b := s.slot().B
	settled(t, b, pm, cm, 1)

	before := wakesBy(pm)
	fill(t, s, 1, 1)
	testwait.Until(t, "a frame wake", func() bool { return wakesBy(pm)[metrics.WakeFrame] > before[metrics.WakeFrame] })
	readTokens(t, a, 1, 1, 5*time.Second)
	settled(t, b, pm, cm, 2)

	before = wakesBy(pm)
	if err := s.Finalize(); err != nil {
		t.Fatal(err)
	}
	testwait.Until(t, "a departed wake", func() bool { return wakesBy(pm)[metrics.WakeDeparted] > before[metrics.WakeDeparted] })

	var sum uint64
	for _, n := range wakesBy(pm) {
		sum += n
	}
	if total := pm.N.BatcherWakes.Load(); total != sum {
		t.Fatalf("wakes by source add up to %d, the total is %d", sum, total)
	}
	for _, src := range []string{"frame", "departed"} {
		if v := metricValue(t, reg, "velo_streaming_mux_batcher_wakes_total", "source="+src); v < 1 {
			t.Errorf(`batcher_wakes_total{source=%q} = %v, want at least 1`, src, v)
		}
	}
}

// Signals that coalesce into one wake count once, for the first source in
// MuxWakeSource order: the goroutine cannot tell which token it took.
func TestMuxCoalescedWakeCountsOnce(t *testing.T) {
	producer, consumer := muxNodes(t, MuxConfig{CreditSweepInterval: time.Minute})
	a, s := muxStream(t, producer, consumer)
	pm, cm := muxOf(t, producer), muxOf(t, consumer)
	fill(t, s, 0, 1)
	readTokens(t, a, 0, 1, 5*time.Second)
	b := s.slot().B
	settled(t, b, pm, cm, 1)

	before, total := wakesBy(pm), pm.N.BatcherWakes.Load()
	// Under the batcher's lock the goroutine cannot start its pass, so
	// both signals are pending when it does.
	b.Mu.Lock()
	b.Signal(metrics.WakeDeparted)
	b.Signal(metrics.WakeOpen)
	b.Mu.Unlock()
	testwait.Until(t, "the wake", func() bool { return pm.N.BatcherWakes.Load() > total })
	settled(t, b, pm, cm, 1)
	after := wakesBy(pm)
	if got := pm.N.BatcherWakes.Load() - total; got != 1 {
		t.Fatalf("%d wakes for two coalesced signals, want 1", got)
	}
	if after[metrics.WakeOpen] != before[metrics.WakeOpen]+1 || after[metrics.WakeDeparted] != before[metrics.WakeDeparted] {
		t.Fatalf("the coalesced wake counted as %v (before %v), want one open", after, before)
	}
}
