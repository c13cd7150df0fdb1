package bench

import (
	"bytes"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// The --procs tests run the parent in the test and every child as this
// test binary again: TestMain sees rpChildEnv (the child's role
// arguments) and serves as the child. rpFaultEnv makes a child fail on
// purpose: "crash" kills it (SIGKILL) right after it said started, "hang"
// blocks its every message from then on.
const (
	rpChildEnv = "VELO_BENCH_RP_CHILD"
	rpFaultEnv = "VELO_BENCH_RP_FAULT"
)

func runRPTestChild(args string) int {
	// A child's velo nodes log their peers at Info; its stderr is the
	// test's.
	slog.SetLogLoggerLevel(slog.LevelWarn)
	fs := flag.NewFlagSet("child", flag.ContinueOnError)
	role := fs.String("rp-role", "", "")
	index := fs.Int("rp-index", 0, "")
	arm := fs.String("rp-arm", "", "")
	if err := fs.Parse(strings.Fields(args)); err != nil {
		return 2
	}
	var out io.Writer = os.Stdout
	if fault := os.Getenv(rpFaultEnv); fault != "" {
		out = &faultWriter{w: os.Stdout, fault: fault}
	}
	if err := ResponsePlaneChild(*role, *index, *arm, os.Stdin, out); err != nil {
		fmt.Fprintln(os.Stderr, "child:", err)
		return 1
	}
	return 0
}

// faultWriter passes the child's messages on until "started", then does
// its fault.
type faultWriter struct {
	w     io.Writer
	fault string
	hit   bool
}

func (f *faultWriter) Write(b []byte) (int, error) {
	if f.hit {
		select {} // hang: the child never speaks again
	}
	n, err := f.w.Write(b)
	if bytes.Contains(b, []byte(`"op":"started"`)) {
		f.hit = true
		if f.fault == "crash" {
			syscall.Kill(os.Getpid(), syscall.SIGKILL)
		}
	}
	return n, err
}

// rpTestSpawn returns a spawn that starts the test binary as a child,
// with fault set in the child whose role arguments are faulty (e.g.
// "--rp-role engine --rp-index 1"), and the list of commands it made.
func rpTestSpawn(faulty, fault string) (func([]string) *exec.Cmd, func() []*exec.Cmd) {
	var mu sync.Mutex
	var cmds []*exec.Cmd
	spawn := func(args []string) *exec.Cmd {
		joined := strings.Join(args, " ")
		cmd := exec.Command(os.Args[0], "-test.run=^$")
		cmd.Env = append(os.Environ(), rpChildEnv+"="+joined)
		if faulty != "" && strings.HasPrefix(joined, faulty+" ") {
			cmd.Env = append(cmd.Env, rpFaultEnv+"="+fault)
		}
		mu.Lock()
		cmds = append(cmds, cmd)
		mu.Unlock()
		return cmd
	}
	return spawn, func() []*exec.Cmd {
		mu.Lock()
		defer mu.Unlock()
		return append([]*exec.Cmd(nil), cmds...)
	}
}

// allGone fails t if a child of cmds still runs (or was never waited for).
func allGone(t *testing.T, cmds []*exec.Cmd) {
	t.Helper()
	for _, c := range cmds {
		if c.Process == nil {
			continue // never started
		}
		if c.ProcessState == nil {
			t.Errorf("child %d (%v) was not waited for", c.Process.Pid, c.Env[len(c.Env)-2:])
			continue
		}
		if err := syscall.Kill(c.Process.Pid, 0); !errors.Is(err, syscall.ESRCH) {
			t.Errorf("child %d still there: kill 0 = %v", c.Process.Pid, err)
		}
	}
}

// TestResponsePlaneProcs runs every arm with frontends and engines as
// child processes: each arm must deliver every token in order (the
// children fail otherwise), the report must hold each side's CPU per
// token, the latencies and the ratios, and every child must be gone.
func TestResponsePlaneProcs(t *testing.T) {
	spawn, cmds := rpTestSpawn("", "")
	samples := &ResponsePlaneSamples{}
	cfg := ResponsePlaneConfig{
		Arms: ResponsePlaneArms, AnchorHosts: 2, Engines: 2, Requests: 20, MaxBatch: 4, Tokens: 4,
		PassDelay: 200 * time.Microsecond, Flush: "auto", Reps: 1, Timeout: time.Minute,
		Procs: true, spawn: spawn, Samples: samples,
	}
	var r Report
	if err := ResponsePlane(cfg, &r); err != nil {
		t.Fatal(err)
	}
	allGone(t, cmds())
	if got, want := len(cmds()), len(cfg.Arms)*(cfg.AnchorHosts+cfg.Engines); got != want {
		t.Errorf("%d children, want %d", got, want)
	}
	value := func(arm, metric string) (float64, bool) {
		for _, f := range r.Figures {
			if f.Arm == arm && f.Metric == metric {
				if f.Params["procs_mode"] != true {
					t.Errorf("%s %s: params %v lack procs_mode", arm, metric, f.Params)
				}
				return f.Median(), len(f.Samples) == cfg.Reps
			}
		}
		return 0, false
	}
	for _, arm := range ResponsePlaneArms {
		for _, m := range []string{"requests_per_s", "tokens_per_s", "cpu_us_per_token", "frontend_cpu_us_per_token",
			"engine_cpu_us_per_token", "ttft_p50_ms", "ttft_p99_ms", "token_latency_p50_us", "token_latency_p99_us"} {
			if v, ok := value(arm, m); !ok || v <= 0 {
				t.Errorf("arm %s: %s = %v (present %v), want > 0", arm, m, v, ok)
			}
		}
		front, _ := value(arm, "frontend_cpu_us_per_token")
		engine, _ := value(arm, "engine_cpu_us_per_token")
		if sum, _ := value(arm, "cpu_us_per_token"); sum < 0.999*(front+engine) || sum > 1.001*(front+engine) {
			t.Errorf("arm %s: cpu_us_per_token %v, want frontend %v + engine %v", arm, sum, front, engine)
		}
		if got, want := len(samples.TTFT[arm]), cfg.Requests; got != want {
			t.Errorf("arm %s: %d TTFT samples, want %d", arm, got, want)
		}
		if got, want := len(samples.TokenLatency[arm]), cfg.Requests*cfg.Tokens; got != want {
			t.Errorf("arm %s: %d token-latency samples, want %d", arm, got, want)
		}
	}
	if _, ok := value("mux", "engine_batcher_wakes_per_token"); !ok {
		t.Error("mux: no engine_batcher_wakes_per_token")
	}
	for _, c := range []struct{ arm, metric string }{
		{"mux/grpc", "frontend_cpu_us_per_token_ratio"}, {"mux/grpc", "engine_cpu_us_per_token_ratio"},
		{"mux/raw", "engine_cpu_us_per_token_ratio"}, {"raw/grpc", "frontend_cpu_us_per_token_ratio"},
		{"mux-zero-rtt/mux", "engine_cpu_us_per_token_ratio"}, {"mux/grpc", "cpu_us_per_token_ratio"},
	} {
		if _, ok := value(c.arm, c.metric); !ok {
			t.Errorf("no %s %s", c.arm, c.metric)
		}
	}
}

// A child that dies mid-run, or one that stops answering, fails the run
// promptly (the death at once, the silence at the run's timeout), and
// the parent leaves no child behind.
func TestResponsePlaneProcsChildFails(t *testing.T) {
	for _, c := range []struct {
		name, faulty, fault, want string
		timeout                   time.Duration
	}{
		{"crash", "--rp-role engine --rp-index 1", "crash", "engine 1 exited early", time.Minute},
		{"hang", "--rp-role frontend --rp-index 0", "hang", "timed out", 3 * time.Second},
	} {
		t.Run(c.name, func(t *testing.T) {
			spawn, cmds := rpTestSpawn(c.faulty, c.fault)
			cfg := ResponsePlaneConfig{
				Arms: []string{"mux", "raw"}, AnchorHosts: 2, Engines: 2, Requests: 20, MaxBatch: 4, Tokens: 4,
				PassDelay: 200 * time.Microsecond, Flush: "auto", Reps: 1, Timeout: c.timeout,
				Procs: true, spawn: spawn,
			}
			done := make(chan error, 1)
			start := time.Now()
			go func() {
				var r Report
				done <- ResponsePlane(cfg, &r)
			}()
			select {
			case err := <-done:
				if err == nil || !strings.Contains(err.Error(), c.want) {
					t.Fatalf("ResponsePlane = %v, want an error with %q", err, c.want)
				}
				t.Logf("failed after %v: %v", time.Since(start).Round(time.Millisecond), err)
			case <-time.After(30 * time.Second):
				t.Fatal("the run did not end")
			}
			allGone(t, cmds())
		})
	}
}
