package bench

import (
	"testing"
	"time"
)

// TestBatchedStreamingTiny runs the mux under both flush policies and the
// per-stream path on a few requests. The harness itself fails a rep that
// loses or reorders a token or whose write counts do not account for every
// token; here the report must also hold the ratio for every rep, and the
// mux must have packed more than one token into a batch on average.
func TestBatchedStreamingTiny(t *testing.T) {
	for _, tc := range []struct {
		name, flush string
		legacy      bool
	}{{"manual", "manual", false}, {"auto", "auto", false}, {"legacy", "manual", true}} {
		t.Run(tc.name, func(t *testing.T) {
			var r Report
			cfg := BatchedStreamingConfig{
				AnchorHosts: 2, Engines: 2, Requests: 12, MaxBatch: 6, Tokens: 9,
				PassDelay: time.Millisecond, Flush: tc.flush, Legacy: tc.legacy, InitialCredit: 64,
				Reps: 2, Timeout: time.Minute,
			}
			if err := BatchedStreaming(cfg, &r); err != nil {
				t.Fatal(err)
			}
			var tokens, ratio *Figure
			for i := range r.Figures {
				switch r.Figures[i].Metric {
				case "tokens_count":
					tokens = &r.Figures[i]
				case "tokens_per_wire_write_ratio":
					ratio = &r.Figures[i]
				}
			}
			if tokens == nil || ratio == nil || len(ratio.Samples) != cfg.Reps {
				t.Fatalf("figures missing: %+v", r.Figures)
			}
			var want float64
			for i := 0; i < cfg.Requests; i++ {
				want += float64(cfg.budget(i))
			}
			if tokens.Min() != want || tokens.Max() != want {
				t.Errorf("tokens %v, want %v every rep", tokens.Samples, want)
			}
			if !tc.legacy && ratio.Min() <= 1 {
				t.Errorf("mux packed %v tokens per write, want more than 1", ratio.Samples)
			}
		})
	}
}
