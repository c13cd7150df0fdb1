package bench

import "testing"

// TestRendezvousFigures runs the harness small and checks that every arm
// reports its throughput and its CPU per MiB, one sample per rep, and
// that both metrics get their get/raw and unary/raw ratios.
func TestRendezvousFigures(t *testing.T) {
	const reps = 2
	var r Report
	cfg := RendezvousConfig{Sizes: []int{1 << 20}, Bytes: 3 << 20, Reps: reps, Arms: []string{"raw", "get", "unary"}}
	if err := Rendezvous(cfg, &r); err != nil {
		t.Fatal(err)
	}
	params := map[string]any{"payload_bytes": 1 << 20, "transfers": 3, "path": "chunked"}
	for _, arm := range cfg.Arms {
		for _, metric := range []string{"throughput_mib_per_s", "cpu_us_per_mib"} {
			f, ok := r.Find(rendezvousHarness, arm, metric, params)
			if !ok || len(f.Samples) != reps {
				t.Fatalf("%s %s: %+v (found %v), want %d samples", arm, metric, f.Samples, ok, reps)
			}
			for _, v := range f.Samples {
				if v <= 0 {
					t.Fatalf("%s %s: sample %v, want a positive figure", arm, metric, v)
				}
			}
		}
	}
	for _, ratio := range []string{"get/raw", "unary/raw"} {
		for _, metric := range []string{"throughput_ratio", "cpu_us_per_mib_ratio"} {
			if f, ok := r.Find(rendezvousHarness, ratio, metric, params); !ok || len(f.Samples) != reps {
				t.Fatalf("%s %s: %+v (found %v), want %d samples", ratio, metric, f.Samples, ok, reps)
			}
		}
	}
}
