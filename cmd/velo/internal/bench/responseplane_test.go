package bench

import (
	"testing"
	"time"
)

// TestResponsePlaneTiny runs every arm on a few requests: each arm must
// deliver every token in order (the harness fails otherwise), the mux arm
// must negotiate messenger-mux-v2 on every request, and the report must
// hold each arm's figures and the ratios.
func TestResponsePlaneTiny(t *testing.T) {
	for _, flush := range []string{"manual", "auto"} {
		t.Run(flush, func(t *testing.T) {
			var r Report
			cfg := ResponsePlaneConfig{
				Arms: ResponsePlaneArms, AnchorHosts: 2, Engines: 2, Requests: 12, MaxBatch: 4, Tokens: 9,
				PassDelay: time.Millisecond, Flush: flush, Reps: 2, Timeout: time.Minute,
			}
			if err := ResponsePlane(cfg, &r); err != nil {
				t.Fatal(err)
			}
			for _, arm := range ResponsePlaneArms {
				for _, m := range []string{"tokens_per_s", "cpu_us_per_token", "ttft_p99_ms", "token_latency_p99_us"} {
					var found bool
					for _, f := range r.Figures {
						if f.Arm == arm && f.Metric == m {
							found = len(f.Samples) == cfg.Reps
						}
					}
					if !found {
						t.Errorf("arm %s: no %s over %d reps", arm, m, cfg.Reps)
					}
				}
			}
			for _, arm := range []string{"mux/grpc", "mux/per-stream"} {
				var found bool
				for _, f := range r.Figures {
					found = found || (f.Arm == arm && f.Metric == "cpu_us_per_token_ratio")
				}
				if !found {
					t.Errorf("no %s ratio", arm)
				}
			}
		})
	}
}
