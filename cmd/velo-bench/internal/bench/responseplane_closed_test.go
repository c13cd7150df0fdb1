package bench

import (
	"context"
	"encoding/binary"
	"io"
	"os"
	"strings"
	"testing"
	"time"
)

// closedTestConfig is a small closed loop: 16 requests open on 2 engines
// of 4-token responses, 200 ms of warm-up and 500 ms measured.
func closedTestConfig() ResponsePlaneConfig {
	return ResponsePlaneConfig{
		Arms: ResponsePlaneArms, AnchorHosts: 2, Engines: 2, MaxBatch: 8, Tokens: 4,
		PassDelay: 500 * time.Microsecond, Flush: "auto", Reps: 1, Timeout: time.Minute,
		Concurrency: 16, Warmup: 200 * time.Millisecond, Duration: 500 * time.Millisecond,
	}
}

// checkClosed checks the figures of a closed loop for every arm: requests
// went through with none failed (a missing, extra or reordered token
// fails its request), at least Concurrency of them read whole, and the
// latency quantiles, CPU per request and ratios are there.
func checkClosed(t *testing.T, cfg ResponsePlaneConfig, r *Report, procs bool) {
	t.Helper()
	value := func(arm, metric string) (float64, bool) {
		for _, f := range r.Figures {
			if f.Arm == arm && f.Metric == metric {
				if f.Params["concurrency"] != cfg.Concurrency || f.Params["duration_s"] != cfg.Duration.Seconds() {
					t.Errorf("%s %s: params %v lack the closed loop's", arm, metric, f.Params)
				}
				return f.Median(), len(f.Samples) == cfg.Reps
			}
		}
		return 0, false
	}
	positive := []string{"requests_per_s", "tokens_per_s", "cpu_us_per_request", "frontend_cpu_us_per_request",
		"ttft_p50_ms", "ttft_p99_ms", "token_latency_p90_us", "token_latency_p99_us"}
	if procs {
		positive = append(positive, "engine_cpu_us_per_request")
	}
	for _, arm := range cfg.Arms {
		for _, m := range positive {
			if v, ok := value(arm, m); !ok || v <= 0 {
				t.Errorf("arm %s: %s = %v (present %v), want > 0", arm, m, v, ok)
			}
		}
		if v, ok := value(arm, "errors_count"); !ok || v != 0 {
			t.Errorf("arm %s: errors_count = %v (present %v), want 0", arm, v, ok)
		}
		if v, _ := value(arm, "requests_completed_count"); v < float64(cfg.Concurrency) {
			t.Errorf("arm %s: %v requests completed, want at least %d", arm, v, cfg.Concurrency)
		}
	}
	for _, pair := range []string{"mux/grpc", "mux/raw", "mux-zero-rtt/mux"} {
		for _, m := range []string{"frontend_cpu_us_per_request_ratio", "requests_per_s_ratio"} {
			if _, ok := value(pair, m); !ok {
				t.Errorf("no %s %s", pair, m)
			}
		}
	}
}

// TestResponsePlaneClosed runs the closed loop of every arm in this
// process.
func TestResponsePlaneClosed(t *testing.T) {
	cfg := closedTestConfig()
	var r Report
	if err := ResponsePlane(cfg, &r); err != nil {
		t.Fatal(err)
	}
	checkClosed(t, cfg, &r, false)
}

// TestResponsePlaneClosedProcs runs the closed loop of every arm with the
// two engines in one child process and the two frontends in another, and
// leaves no child behind.
func TestResponsePlaneClosedProcs(t *testing.T) {
	spawn, cmds := rpTestSpawn("", "")
	cfg := closedTestConfig()
	cfg.Procs, cfg.spawn, cfg.EngineProcs, cfg.FrontendProcs = true, spawn, 1, 1
	var r Report
	if err := ResponsePlane(cfg, &r); err != nil {
		t.Fatal(err)
	}
	allGone(t, cmds())
	if got, want := len(cmds()), len(cfg.Arms)*2; got != want {
		t.Errorf("%d children, want %d", got, want)
	}
	checkClosed(t, cfg, &r, true)
}

// A batch run with several nodes in each child: every request of the
// batch is served and read whole, and its latencies land by index.
func TestResponsePlaneProcsShared(t *testing.T) {
	spawn, cmds := rpTestSpawn("", "")
	samples := &ResponsePlaneSamples{}
	cfg := ResponsePlaneConfig{
		Arms: []string{"mux", "grpc", "raw"}, AnchorHosts: 2, Engines: 4, Requests: 22, MaxBatch: 4, Tokens: 3,
		Flush: "auto", Reps: 1, Timeout: time.Minute, Procs: true, spawn: spawn, Samples: samples,
		EngineProcs: 2, FrontendProcs: 1,
	}
	var r Report
	if err := ResponsePlane(cfg, &r); err != nil {
		t.Fatal(err)
	}
	allGone(t, cmds())
	if got, want := len(cmds()), len(cfg.Arms)*3; got != want {
		t.Errorf("%d children, want %d", got, want)
	}
	for _, arm := range cfg.Arms {
		for _, v := range samples.TTFT[arm] {
			if v <= 0 {
				t.Errorf("arm %s: a TTFT of %d ns: a request's latencies were not filled in", arm, v)
				break
			}
		}
		if got, want := len(samples.TokenLatency[arm]), cfg.Requests*cfg.Tokens; got != want {
			t.Errorf("arm %s: %d token-latency samples, want %d", arm, got, want)
		}
	}
}

// The process counts must split their side evenly and need procs mode;
// a closed loop needs a duration.
func TestResponsePlaneClosedFlags(t *testing.T) {
	base := closedTestConfig()
	for _, c := range []struct {
		name string
		mod  func(*ResponsePlaneConfig)
		ok   bool
	}{
		{"base", func(*ResponsePlaneConfig) {}, true},
		{"no duration", func(c *ResponsePlaneConfig) { c.Duration = 0 }, false},
		{"engine procs in-process", func(c *ResponsePlaneConfig) { c.EngineProcs = 1 }, false},
		{"engine procs", func(c *ResponsePlaneConfig) { c.Procs, c.EngineProcs = true, 1 }, true},
		{"uneven engines", func(c *ResponsePlaneConfig) { c.Procs, c.Engines, c.EngineProcs = true, 3, 2 }, false},
		{"frontend procs", func(c *ResponsePlaneConfig) { c.Procs, c.FrontendProcs = true, 1 }, true},
		{"too many frontend procs", func(c *ResponsePlaneConfig) { c.Procs, c.FrontendProcs = true, 4 }, false},
	} {
		cfg := base
		c.mod(&cfg)
		if err := cfg.Validate(); (err == nil) != c.ok {
			t.Errorf("%s: Validate = %v, want ok %v", c.name, err, c.ok)
		}
	}
}

// rpFakeFronts serves every request from memory: request i's response is
// its Tokens tokens in order, except that every third request skips its
// second token.
type rpFakeFronts struct{ tokens int }

func (f rpFakeFronts) open(_ context.Context, i, _, _ int, consume func(func() ([]byte, error)) error) (any, error) {
	pos := 0
	go consume(func() ([]byte, error) {
		if pos == 1 && i%3 == 0 {
			pos++
		}
		if pos >= f.tokens {
			return nil, io.EOF
		}
		tok := make([]byte, rpTokenBytes)
		binary.BigEndian.PutUint64(tok, uint64(i))
		binary.BigEndian.PutUint32(tok[8:], uint32(pos))
		pos++
		return tok, nil
	})
	return nil, nil
}

func (rpFakeFronts) close() {}

// A request that fails its checks is counted, its slot goes on, and the
// run reports the count instead of failing.
func TestResponsePlaneClosedCountsErrors(t *testing.T) {
	cfg := closedTestConfig()
	// No warm-up: every request is in the window.
	cfg.AnchorHosts, cfg.Engines, cfg.Concurrency = 1, 1, 4
	cfg.Warmup, cfg.Duration = 0, 50*time.Millisecond
	now := func() int64 { return time.Now().UnixNano() }
	start := now()
	load := newRPLoad(cfg, now, start, start+int64(cfg.Duration))
	load.front(context.Background(), rpFakeFronts{tokens: cfg.Tokens}, 0, 0,
		func(context.Context, int, int, any) error { return nil })
	s := load.summary()
	if s.Errors == 0 || s.Completed == 0 || s.Errors+s.Completed < cfg.Concurrency {
		t.Fatalf("summary %+v: want both failed and completed requests", s)
	}
	if !strings.Contains(s.FirstErr, "got token 2") {
		t.Errorf("first error %q, want the skipped token's", s.FirstErr)
	}
	rpLog = io.Discard
	defer func() { rpLog = os.Stderr }()
	var r Report
	if err := addRPClosedResult(&r, cfg, "fake", map[string]any{}, s, time.Millisecond, 0, false); err != nil {
		t.Fatal(err)
	}
	if f, ok := r.Find(responsePlaneHarness, "fake", "errors_count", map[string]any{}); !ok || f.Median() != float64(s.Errors) {
		t.Errorf("errors_count %v (present %v), want %d", f.Median(), ok, s.Errors)
	}
}
