package bench

import (
	"os"
	"path/filepath"
	"strings"
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
			for _, arm := range []string{"mux/grpc", "mux/per-stream", "mux/raw", "mux-zero-rtt/raw"} {
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

// TestResponsePlanePlot runs a tiny response plane with every arm and
// checks that --plot's writer makes a non-empty PNG and SVG of the right
// kind, and refuses other extensions.
func TestResponsePlanePlot(t *testing.T) {
	samples := &ResponsePlaneSamples{}
	var r Report
	cfg := ResponsePlaneConfig{
		Arms: ResponsePlaneArms, AnchorHosts: 1, Engines: 2, Requests: 6, MaxBatch: 3, Tokens: 5,
		Flush: "auto", Reps: 1, Timeout: time.Minute, Samples: samples,
	}
	if err := ResponsePlane(cfg, &r); err != nil {
		t.Fatal(err)
	}
	for _, arm := range ResponsePlaneArms {
		if got, want := len(samples.TTFT[arm]), cfg.Requests; got != want {
			t.Errorf("arm %s: %d TTFT samples, want %d", arm, got, want)
		}
		if got, want := len(samples.TokenLatency[arm]), cfg.Requests*cfg.Tokens; got != want {
			t.Errorf("arm %s: %d token-latency samples, want %d", arm, got, want)
		}
	}
	dir := t.TempDir()
	for ext, magic := range map[string]string{".png": "\x89PNG\r\n\x1a\n", ".svg": "<?xml"} {
		path := filepath.Join(dir, "cdf"+ext)
		if err := WriteResponsePlanePlot(path, "tiny", samples); err != nil {
			t.Fatalf("%s: %v", ext, err)
		}
		b, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		if len(b) < 1000 || !strings.HasPrefix(string(b), magic) {
			t.Errorf("%s: %d bytes starting %q", ext, len(b), b[:min(len(b), 16)])
		}
		if ext == ".svg" && !strings.Contains(string(b), "<svg") {
			t.Errorf("svg: no <svg element")
		}
	}
	if err := WriteResponsePlanePlot(filepath.Join(dir, "cdf.gif"), "", samples); err == nil {
		t.Error("a .gif path was accepted")
	}
}

// TestResponsePlaneWakes checks that the velo arms report wakes per token
// (the batcher's only where there is one) and grpc reports none.
func TestResponsePlaneWakes(t *testing.T) {
	var r Report
	cfg := ResponsePlaneConfig{
		Arms: ResponsePlaneArms, AnchorHosts: 1, Engines: 2, Requests: 8, MaxBatch: 4, Tokens: 6,
		PassDelay: time.Millisecond, Flush: "auto", Reps: 1, Timeout: time.Minute,
	}
	if err := ResponsePlane(cfg, &r); err != nil {
		t.Fatal(err)
	}
	has := func(arm, metric string) (float64, bool) {
		for _, f := range r.Figures {
			if f.Arm == arm && f.Metric == metric {
				return f.Median(), true
			}
		}
		return 0, false
	}
	for _, c := range []struct {
		arm, metric string
		want        bool
	}{
		{"mux", "engine_batcher_wakes_per_token", true},
		{"mux", "frontend_batcher_wakes_per_token", true},
		{"mux", "consumer_wakes_per_token", true},
		{"per-stream", "consumer_wakes_per_token", true},
		{"per-stream", "engine_batcher_wakes_per_token", false},
		{"grpc", "consumer_wakes_per_token", false},
	} {
		v, ok := has(c.arm, c.metric)
		if ok != c.want {
			t.Errorf("arm %s, %s: present %v, want %v", c.arm, c.metric, ok, c.want)
		}
		// With a pass every millisecond the engine batcher must wake at
		// least once per pass, and a consumer waits between passes.
		if ok && c.metric != "frontend_batcher_wakes_per_token" && v <= 0 {
			t.Errorf("arm %s, %s = %v, want > 0", c.arm, c.metric, v)
		}
	}
}

// TestResponsePlaneZeroRTTLinger runs mux and mux-zero-rtt side by side
// under each engine flush policy, auto-linger with its early ends
// included: every token must arrive in order on both arms (the harness
// fails otherwise), and the report must hold the mux-zero-rtt/mux ratios.
func TestResponsePlaneZeroRTTLinger(t *testing.T) {
	for _, c := range []struct {
		name string
		cfg  ResponsePlaneConfig
	}{
		{"auto", ResponsePlaneConfig{Flush: "auto"}},
		{"manual", ResponsePlaneConfig{Flush: "manual"}},
		{"linger", ResponsePlaneConfig{Flush: "auto-linger", LingerUS: 500}},
		{"linger-complete-bytes", ResponsePlaneConfig{Flush: "auto-linger", LingerUS: 2000, OnComplete: true, AtBytes: 256}},
	} {
		t.Run(c.name, func(t *testing.T) {
			cfg := c.cfg
			cfg.Arms = []string{"mux", "mux-zero-rtt"}
			cfg.AnchorHosts, cfg.Engines, cfg.Requests, cfg.MaxBatch, cfg.Tokens = 2, 2, 10, 3, 7
			cfg.PassDelay, cfg.Reps, cfg.Timeout = 200*time.Microsecond, 2, time.Minute
			var r Report
			if err := ResponsePlane(cfg, &r); err != nil {
				t.Fatal(err)
			}
			for _, m := range []string{"ttft_p50_ms_ratio", "tokens_per_s_ratio", "cpu_us_per_token_ratio"} {
				var n int
				for _, f := range r.Figures {
					if f.Arm == "mux-zero-rtt/mux" && f.Metric == m {
						n = len(f.Samples)
					}
				}
				if n != cfg.Reps {
					t.Errorf("mux-zero-rtt/mux %s: %d samples, want %d", m, n, cfg.Reps)
				}
			}
		})
	}
}

// TestResponsePlaneLingerFlags checks that the linger settings are refused
// without auto-linger and when negative.
func TestResponsePlaneLingerFlags(t *testing.T) {
	base := ResponsePlaneConfig{Arms: []string{"mux"}, AnchorHosts: 1, Engines: 1, Requests: 1, MaxBatch: 1, Tokens: 1, Reps: 1}
	for _, c := range []struct {
		flush   string
		linger  int
		onComp  bool
		atBytes int
		ok      bool
	}{
		{"auto-linger", 2000, true, 4096, true},
		{"auto-linger", 0, false, 0, true},
		{"auto", 2000, false, 0, false},
		{"manual", 0, true, 0, false},
		{"auto", 0, false, 64, false},
		{"auto-linger", -1, false, 0, false},
		{"linger", 0, false, 0, false},
	} {
		cfg := base
		cfg.Flush, cfg.LingerUS, cfg.OnComplete, cfg.AtBytes = c.flush, c.linger, c.onComp, c.atBytes
		if err := cfg.Validate(); (err == nil) != c.ok {
			t.Errorf("%+v: Validate = %v, want ok %v", c, err, c.ok)
		}
	}
}

// With --lanes 4 every velo arm runs on four-lane TCP transports, the
// params name the lanes, and a lane count out of range is refused.
func TestResponsePlaneLanes(t *testing.T) {
	cfg := ResponsePlaneConfig{Arms: []string{"mux", "mux-zero-rtt", "per-stream"}, Flush: "auto", Lanes: 4,
		AnchorHosts: 2, Engines: 2, Requests: 12, MaxBatch: 4, Tokens: 5, Reps: 1, Timeout: time.Minute}
	var r Report
	if err := ResponsePlane(cfg, &r); err != nil {
		t.Fatal(err)
	}
	var n int
	for _, f := range r.Figures {
		if f.Metric == "tokens_per_s" {
			if f.Params["lanes"] != 4 {
				t.Errorf("%s: params %v lack lanes=4", f.Arm, f.Params)
			}
			n++
		}
	}
	if n != len(cfg.Arms) {
		t.Fatalf("tokens_per_s for %d arms, want %d", n, len(cfg.Arms))
	}
	for _, lanes := range []int{-1, 17} {
		cfg.Lanes = lanes
		if cfg.Validate() == nil {
			t.Errorf("lanes %d accepted", lanes)
		}
	}
}

// A raw arm that runs out of time ends its consumers and reports the
// timeout instead of hanging: it has no protocol to end them otherwise.
func TestResponsePlaneRawTimesOut(t *testing.T) {
	var r Report
	cfg := ResponsePlaneConfig{
		Arms: []string{"raw"}, AnchorHosts: 1, Engines: 1, Requests: 4, MaxBatch: 4, Tokens: 1000,
		PassDelay: 20 * time.Millisecond, Flush: "auto", Reps: 1, Timeout: 100 * time.Millisecond,
	}
	done := make(chan error, 1)
	go func() { done <- ResponsePlane(cfg, &r) }()
	select {
	case err := <-done:
		if err == nil || !strings.Contains(err.Error(), "timed out") {
			t.Fatalf("ResponsePlane = %v, want the run's timeout", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("a timed-out raw arm did not return")
	}
}
