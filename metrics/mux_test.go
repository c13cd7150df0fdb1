package metrics

import (
	"testing"

	"github.com/prometheus/client_golang/prometheus"
)

// gathered returns the value of the series name with label value lv (or
// the only series when lv is ""), from reg.
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
			if lv != "" && (len(m.GetLabel()) == 0 || m.GetLabel()[0].GetValue() != lv) {
				continue
			}
			switch {
			case m.GetCounter() != nil:
				return m.GetCounter().GetValue()
			case m.GetGauge() != nil:
				return m.GetGauge().GetValue()
			}
		}
	}
	t.Fatalf("no series %s{%s}", name, lv)
	return 0
}

// The mux series are read from the muxes at scrape time and summed; a mux
// that stops reporting keeps its counts in the totals, and its gauges go.
func TestMuxSeriesSumAndRetire(t *testing.T) {
	reg := prometheus.NewRegistry()
	vm, err := Register(reg)
	if err != nil {
		t.Fatal(err)
	}
	mm := vm.Mux()
	a := MuxSnapshot{BatchesSent: 3, LiveSlots: 2, SlotCreditExhausted: 1}
	a.RecordsSent[MuxData] = 30
	a.BatcherWakes[WakeOpen], a.BatcherWakes[WakeLinger] = 2, 9
	b := MuxSnapshot{BatchesSent: 4, BatchesReceived: 5, LiveSlots: 1}
	b.RecordsDropped[DropGeneration] = 2
	b.BatcherWakes[WakeOpen] = 1
	stopA := mm.Report(func() MuxSnapshot { return a })
	mm.Report(func() MuxSnapshot { return b })
	mm.BatchSent(30)
	if got := gathered(t, reg, "velo_streaming_mux_batches_total", "sent"); got != 7 {
		t.Fatalf("batches sent = %v, want 7", got)
	}
	if got := gathered(t, reg, "velo_streaming_mux_live_slots", ""); got != 3 {
		t.Fatalf("live slots = %v, want 3", got)
	}
	if got := gathered(t, reg, "velo_streaming_mux_records_sent_total", "data"); got != 30 {
		t.Fatalf("data records = %v, want 30", got)
	}
	if got := gathered(t, reg, "velo_streaming_mux_records_dropped_total", "generation"); got != 2 {
		t.Fatalf("dropped = %v, want 2", got)
	}
	for src, want := range map[string]float64{"open": 3, "control": 0, "frame": 0, "departed": 0, "linger": 9} {
		if got := gathered(t, reg, "velo_streaming_mux_batcher_wakes_total", src); got != want {
			t.Fatalf("wakes{source=%q} = %v, want %v", src, got, want)
		}
	}
	stopA()
	stopA() // idempotent
	if got := gathered(t, reg, "velo_streaming_mux_batches_total", "sent"); got != 7 {
		t.Fatalf("batches sent after a mux stopped = %v, want 7 (counters never go down)", got)
	}
	if got := gathered(t, reg, "velo_streaming_mux_live_slots", ""); got != 1 {
		t.Fatalf("live slots after a mux stopped = %v, want 1", got)
	}
	if got := gathered(t, reg, "velo_streaming_mux_batcher_wakes_total", "linger"); got != 9 {
		t.Fatalf("linger wakes after a mux stopped = %v, want 9 (counters never go down)", got)
	}
	if got := gathered(t, reg, "velo_streaming_slot_credit_exhausted_total", ""); got != 1 {
		t.Fatalf("credit exhausted = %v, want 1", got)
	}
}
