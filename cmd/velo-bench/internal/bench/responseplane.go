package bench

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/velo-go/velo/ext"
	"github.com/velo-go/velo/internal/muxwire"
	"github.com/velo-go/velo/streaming"
	"github.com/velo-go/velo/transport/tcp"
)

// The response-plane harness models the serving shape the mux exists for. Anchor hosts stand in for
// frontends and own one response stream per request. Engines run
// continuous batching: each forward pass puts exactly one token on every
// active request's stream. Requests reach the engines round-robin over an
// in-process channel (with Procs, a TCP control connection), and the
// response path is real: frontends and engines are separate nodes, so
// every attach and every token crosses loopback TCP.
//
// Arms, interleaved per rep (rotated):
//   - mux: velo with the messenger mux (every Sender must negotiate
//     messenger-mux-v2, or the run fails);
//   - mux-zero-rtt: the same nodes, but the frontend pre-binds the anchor
//     when it registers the request (PrebindAnchor) and the ticket rides
//     with the request to the engine, which opens the stream with
//     OpenAnchorStream: no attach round trip before the first token;
//   - per-stream: the same velo code with the mux off (one TCP connection
//     per stream; every Sender must negotiate tcp-stream);
//   - grpc: grpc-go, one server-streaming call per request over one
//     HTTP/2 connection per frontend–engine pair; the engine is the gRPC
//     server and streams the tokens;
//   - raw: no protocol at all, the floor under any Go plane with a
//     goroutine per request: each engine writes a pass's tokens for a
//     frontend in one write, and a reader hands them to the consumers
//     over channels (responseplane_raw.go).
//
// Each plane comes in two halves, rpFrontends and rpEngines. In-process
// both halves live in this process and one CPU figure covers both sides.
// With Procs (--procs) every frontend and every engine is a child process
// of its own, requests reach the engines over a TCP control connection,
// and CPU is measured per side (responseplane_procs.go for the parent,
// responseplane_child.go and responseplane_roles.go for the children).
//
// The load is a batch of Requests dispatched at once, or, with
// Concurrency, a closed loop that keeps that many open through a warm-up
// and a measured window (responseplane_closed.go).

// ResponsePlaneArms are the arms of the response-plane harness.
var ResponsePlaneArms = []string{"mux", "mux-zero-rtt", "per-stream", "grpc", "raw"}

const responsePlaneHarness = "response-plane"

// rpTokenBytes is the size of one token's payload.
const rpTokenBytes = 40

// ResponsePlaneConfig sets the response-plane harness.
type ResponsePlaneConfig struct {
	Arms        []string
	AnchorHosts int // frontends
	Engines     int
	Requests    int
	MaxBatch    int // active requests per engine
	Tokens      int // tokens in every request
	PassDelay   time.Duration
	// Flush is the mux flush policy of the engines: manual (FlushBatch
	// once per pass), auto, or auto-linger (FlushLinger with the window
	// LingerUS and the early ends OnComplete and AtBytes).
	Flush      string
	LingerUS   int  // auto-linger: MaxLinger in microseconds (0: velo's default, 2 ms)
	OnComplete bool // auto-linger: end the window once every live slot has a record
	AtBytes    int  // auto-linger: end the window at this many staged bytes (0: no limit)
	// FrontendFlush is the mux flush policy of the anchor hosts, which
	// send only control (credit replies); "" is auto. A frontend never
	// calls FlushBatch.
	FrontendFlush string
	InitialCredit uint32 // mux credit window; 0 is velo's default
	// Lanes builds the TCP transport of every velo node WithLanes(Lanes)
	// (0 or 1: one lane, the transport's default). The grpc arm has no
	// lanes.
	Lanes int
	Reps  int
	// Timeout bounds one arm of one rep; a run that takes longer fails.
	Timeout time.Duration
	// Samples, when set, collects every arm's TTFT and token latencies
	// over all reps (for --plot).
	Samples *ResponsePlaneSamples `json:"-"`
	// Procs runs every frontend and every engine as its own child process
	// (this binary again, as `response-plane --rp-role ...`), so that CPU
	// per token splits into the frontends' and the engines'.
	Procs bool
	// spawn makes the command of a child given its role arguments; nil
	// re-executes os.Executable() as `response-plane args...`. Tests
	// re-run the test binary instead.
	spawn func(args []string) *exec.Cmd
	// Concurrency > 0 makes the run a closed loop (responseplane_closed.go)
	// instead of a batch of Requests: that many requests stay open, each
	// frontend starting its next as soon as one of its own is read whole,
	// for Warmup and then the measured Duration, after which dispatch stops
	// and the open requests drain.
	Concurrency      int
	Warmup, Duration time.Duration
	// EngineProcs and FrontendProcs (Procs only) spread the engines and
	// the frontends over that many child processes, each holding an equal
	// share of nodes; 0 is one process per engine, resp. per frontend.
	EngineProcs, FrontendProcs int
	// ChildCPUProfile (Procs only), when set, makes every child write a
	// CPU profile of its whole life to ChildCPUProfile.<arm>.<role><index>.<pid>
	// (the pid tells the reps apart).
	ChildCPUProfile string
}

// engineProcs is the number of engine children of a Procs run.
func (c ResponsePlaneConfig) engineProcs() int {
	if c.EngineProcs == 0 {
		return c.Engines
	}
	return c.EngineProcs
}

// frontendProcs is the number of frontend children of a Procs run.
func (c ResponsePlaneConfig) frontendProcs() int {
	if c.FrontendProcs == 0 {
		return c.AnchorHosts
	}
	return c.FrontendProcs
}

// ResponsePlaneSamples holds the raw latencies of a run, pooled over the
// reps, by arm in the order the arms were given.
type ResponsePlaneSamples struct {
	Arms []string
	// TTFT and TokenLatency are in nanoseconds, by arm.
	TTFT, TokenLatency map[string][]int64
}

func (s *ResponsePlaneSamples) add(arm string, ttft, tokLat []int64) {
	if s.TTFT == nil {
		s.TTFT, s.TokenLatency = map[string][]int64{}, map[string][]int64{}
	}
	if !slices.Contains(s.Arms, arm) {
		s.Arms = append(s.Arms, arm)
	}
	s.TTFT[arm] = append(s.TTFT[arm], ttft...)
	s.TokenLatency[arm] = append(s.TokenLatency[arm], tokLat...)
}

// Validate reports a config that cannot run.
func (c ResponsePlaneConfig) Validate() error {
	if len(c.Arms) == 0 {
		return errors.New("no arm to run")
	}
	for _, a := range c.Arms {
		if !slices.Contains(ResponsePlaneArms, a) {
			return fmt.Errorf("unknown arm %q (want %v)", a, ResponsePlaneArms)
		}
	}
	if c.AnchorHosts < 1 || c.Engines < 1 || c.MaxBatch < 1 || c.Tokens < 1 || c.Reps < 1 {
		return errors.New("anchor hosts, engines, max batch, tokens and reps must be positive")
	}
	if c.Concurrency < 0 {
		return errors.New("concurrency must not be negative")
	}
	if c.Concurrency == 0 && c.Requests < 1 {
		return errors.New("requests must be positive")
	}
	if c.Concurrency > 0 && (c.Warmup < 0 || c.Duration <= 0) {
		return errors.New("a closed loop needs a warm-up of zero or more and a positive duration")
	}
	if c.EngineProcs < 0 || c.FrontendProcs < 0 {
		return errors.New("engine and frontend processes must not be negative")
	}
	if c.ChildCPUProfile != "" && !c.Procs {
		return errors.New("child CPU profiles need procs mode")
	}
	if (c.EngineProcs != 0 || c.FrontendProcs != 0) && !c.Procs {
		return errors.New("engine and frontend processes need procs mode")
	}
	if c.Engines%c.engineProcs() != 0 || c.AnchorHosts%c.frontendProcs() != 0 {
		return fmt.Errorf("%d engines over %d processes, %d frontends over %d: each process must hold an equal share",
			c.Engines, c.engineProcs(), c.AnchorHosts, c.frontendProcs())
	}
	if c.PassDelay < 0 {
		return errors.New("pass delay must not be negative")
	}
	if c.Flush != "manual" && c.Flush != "auto" && c.Flush != "auto-linger" {
		return fmt.Errorf("unknown flush policy %q (want manual, auto or auto-linger)", c.Flush)
	}
	if c.Flush != "auto-linger" && (c.LingerUS != 0 || c.OnComplete || c.AtBytes != 0) {
		return errors.New("linger, on-complete and at-bytes need flush policy auto-linger")
	}
	if c.LingerUS < 0 || c.AtBytes < 0 {
		return errors.New("linger and at-bytes must not be negative")
	}
	if c.FrontendFlush != "" && c.FrontendFlush != "manual" && c.FrontendFlush != "auto" {
		return fmt.Errorf("unknown frontend flush policy %q (want manual or auto)", c.FrontendFlush)
	}
	if c.Lanes < 0 || c.Lanes > muxwire.Lanes {
		return fmt.Errorf("lanes %d out of range 1..%d", c.Lanes, muxwire.Lanes)
	}
	return nil
}

// newTCP builds the TCP transport of a velo node of the run.
func (c ResponsePlaneConfig) newTCP() (ext.Transport, error) {
	if c.Lanes <= 1 {
		return NewTransport("tcp")
	}
	return tcp.New(append(tcpBufferOption(), tcp.WithLanes(c.Lanes))...)
}

// rpStream is one request's response stream as the engine sees it.
type rpStream interface {
	send(ctx context.Context, token []byte) error
	finish() error
}

// rpFrontends is the frontend half of an arm.
type rpFrontends interface {
	// open is the frontend side of request i: it creates the response
	// stream on frontend h towards engine e, starts a goroutine that runs
	// consume on what arrives, and returns what the engine needs to bind.
	open(ctx context.Context, i, h, e int, consume func(next func() ([]byte, error)) error) (any, error)
	close()
}

// rpEngines is the engine half of an arm.
type rpEngines interface {
	// bind is the engine side: engine e takes over the stream of a
	// dispatched request.
	bind(ctx context.Context, e int, req any) (rpStream, error)
	// pass ends one forward pass of engine e (the manual flush).
	pass(e int)
	close()
}

// rpPlane is one arm's set of frontends and engines in one process.
type rpPlane interface {
	rpFrontends
	rpEngines
}

// rpWakes are the wake counters of a velo plane, summed over its nodes.
// A half fills only its side's counters. The fields are exported for the
// children's reports.
type rpWakes struct {
	EngineBatcher, HostBatcher uint64 // mux batcher goroutine wakes
	HostConsumer               uint64 // consumers woken in NextBytes
	EngineBatches, HostBatches uint64 // mux batches sent
	CreditExhausted            uint64 // engines' sends that found their slot without credit
}

func (w rpWakes) add(o rpWakes) rpWakes {
	return rpWakes{w.EngineBatcher + o.EngineBatcher, w.HostBatcher + o.HostBatcher, w.HostConsumer + o.HostConsumer,
		w.EngineBatches + o.EngineBatches, w.HostBatches + o.HostBatches, w.CreditExhausted + o.CreditExhausted}
}

func (w rpWakes) sub(o rpWakes) rpWakes {
	return rpWakes{w.EngineBatcher - o.EngineBatcher, w.HostBatcher - o.HostBatcher, w.HostConsumer - o.HostConsumer,
		w.EngineBatches - o.EngineBatches, w.HostBatches - o.HostBatches, w.CreditExhausted - o.CreditExhausted}
}

// rpWakeCounter is a plane or half that can count its wakes (the velo arms).
type rpWakeCounter interface {
	wakes() rpWakes
	muxed() bool // false: there is no batcher, its counts do not apply
}

// ResponsePlane runs the harness and adds its figures to r.
func ResponsePlane(cfg ResponsePlaneConfig, r *Report) error {
	if err := cfg.Validate(); err != nil {
		return err
	}
	if cfg.Samples != nil {
		cfg.Samples.Arms = slices.Clone(cfg.Arms)
	}
	if cfg.FrontendFlush == "" {
		cfg.FrontendFlush = "auto"
	}
	if cfg.Timeout == 0 {
		cfg.Timeout = 10 * time.Minute
	}
	params := map[string]any{"anchor_hosts": cfg.AnchorHosts, "engines": cfg.Engines, "requests": cfg.Requests,
		"max_batch": cfg.MaxBatch, "tokens": cfg.Tokens, "pass_delay_ms": float64(cfg.PassDelay) / float64(time.Millisecond),
		"flush_policy": cfg.Flush, "frontend_flush_policy": cfg.FrontendFlush, "procs": runtime.GOMAXPROCS(0)}
	if cfg.Lanes > 1 {
		// Only then, so that one-lane figures keep the params they had.
		params["lanes"] = cfg.Lanes
	}
	if cfg.Flush == "auto-linger" {
		params["linger_us"], params["on_complete"], params["at_bytes"] = cfg.LingerUS, cfg.OnComplete, cfg.AtBytes
	}
	run := responsePlaneRun
	if cfg.Procs {
		// Only then, so that in-process figures keep the params they had.
		params["procs_mode"] = true
		run = responsePlaneProcsRun
		if cfg.EngineProcs != 0 || cfg.FrontendProcs != 0 {
			params["engine_procs"], params["frontend_procs"] = cfg.engineProcs(), cfg.frontendProcs()
		}
	}
	if cfg.Concurrency > 0 {
		// A closed loop has no request count; its shape is the load.
		delete(params, "requests")
		params["concurrency"], params["warmup_s"], params["duration_s"] = cfg.Concurrency, cfg.Warmup.Seconds(), cfg.Duration.Seconds()
		if !cfg.Procs {
			run = responsePlaneClosedRun
		}
	}
	for rep := 0; rep < cfg.Reps; rep++ {
		for _, arm := range rotated(cfg.Arms, rep) {
			if err := run(cfg, arm, params, r); err != nil {
				return fmt.Errorf("%s, rep %d: %w", arm, rep+1, err)
			}
		}
	}
	if cfg.Concurrency > 0 {
		addRPClosedRatios(r, cfg, params)
		return nil
	}
	cpuMetrics := []string{"cpu_us_per_token"}
	if cfg.Procs {
		cpuMetrics = append(cpuMetrics, "frontend_cpu_us_per_token", "engine_cpu_us_per_token")
	}
	// mux-zero-rtt/raw is the CPU budget of issue 23 (row 8), in one
	// invocation and paired by rep like the others.
	for _, pair := range [][2]string{{"mux", "grpc"}, {"mux", "per-stream"}, {"mux", "raw"}, {"mux-zero-rtt", "raw"}, {"raw", "grpc"}} {
		if !slices.Contains(cfg.Arms, pair[0]) || !slices.Contains(cfg.Arms, pair[1]) {
			continue
		}
		for _, metric := range append(slices.Clone(cpuMetrics), "tokens_per_s") {
			num, _ := r.Find(responsePlaneHarness, pair[0], metric, params)
			den, _ := r.Find(responsePlaneHarness, pair[1], metric, params)
			r.Ratio(responsePlaneHarness, pair[0]+"/"+pair[1], metric+"_ratio", num, den, params)
		}
	}
	if slices.Contains(cfg.Arms, "mux") && slices.Contains(cfg.Arms, "mux-zero-rtt") {
		for _, metric := range append([]string{"ttft_p50_ms", "tokens_per_s"}, cpuMetrics...) {
			num, _ := r.Find(responsePlaneHarness, "mux-zero-rtt", metric, params)
			den, _ := r.Find(responsePlaneHarness, "mux", metric, params)
			r.Ratio(responsePlaneHarness, "mux-zero-rtt/mux", metric+"_ratio", num, den, params)
		}
	}
	return nil
}

// engineMuxConfig is the engines' mux config for cfg's flush policy.
func engineMuxConfig(cfg ResponsePlaneConfig) streaming.MuxConfig {
	mc := streaming.MuxConfig{InitialCredit: cfg.InitialCredit}
	switch cfg.Flush {
	case "manual":
		mc.Flush = streaming.FlushManual
	case "auto-linger":
		mc.Flush = streaming.FlushLinger
		mc.MaxLinger = time.Duration(cfg.LingerUS) * time.Microsecond
		mc.OnComplete, mc.AtBytes = cfg.OnComplete, cfg.AtBytes
	}
	return mc
}

func newPlane(ctx context.Context, cfg ResponsePlaneConfig, arm string) (rpPlane, error) {
	if a, ok := veloArmOf(cfg, arm); ok {
		return newVeloPlane(ctx, cfg, a)
	}
	switch arm {
	case "grpc":
		return newGRPCPlane(cfg)
	case "raw":
		return newRawPlane(ctx, cfg)
	}
	return nil, fmt.Errorf("unknown arm %q", arm)
}

// responsePlaneRun is one arm of one rep on fresh nodes, all in this
// process.
func responsePlaneRun(cfg ResponsePlaneConfig, arm string, params map[string]any, r *Report) error {
	ctx, cancel := context.WithTimeoutCause(context.Background(), cfg.Timeout, errors.New("run timed out"))
	defer cancel()
	ctx, fail := context.WithCancelCause(ctx)
	defer fail(nil)
	plane, err := newPlane(ctx, cfg, arm)
	if err != nil {
		return err
	}
	defer plane.close()

	n := cfg.Requests
	base := time.Now()
	times := newRPTimes(cfg, func() int64 { return int64(time.Since(base)) })
	var errMu sync.Mutex
	var firstErr error
	setErr := func(err error) {
		errMu.Lock()
		if firstErr == nil {
			firstErr = err
		}
		errMu.Unlock()
		fail(err)
	}

	queues := make([]chan rpQueued, cfg.Engines)
	for e := range queues {
		queues[e] = make(chan rpQueued, n)
	}
	var engines sync.WaitGroup
	for e := range cfg.Engines {
		engines.Add(1)
		go func() {
			defer engines.Done()
			if err := rpEngine(ctx, cfg, plane, e, queues[e], times.now); err != nil {
				setErr(fmt.Errorf("engine %d: %w", e, err))
			}
		}()
	}

	runtime.GC()
	wc, counting := plane.(rpWakeCounter)
	var wakes0 rpWakes
	if counting {
		wakes0 = wc.wakes()
	}
	writes0, cpu0, t0 := writeSyscalls(), processCPU(), time.Now()
	var consumers sync.WaitGroup
	for i := 0; i < n; i++ {
		h, e := i%cfg.AnchorHosts, i%cfg.Engines
		req, err := times.open(ctx, plane, i, h, e, &consumers, setErr)
		if err != nil {
			setErr(err)
			break
		}
		queues[e] <- rpQueued{idx: i, req: req}
	}
	for _, q := range queues {
		close(q)
	}
	consumers.Wait()
	res := rpResult{wall: time.Since(t0), cpu: processCPU() - cpu0, writes: writeSyscalls() - writes0}
	if counting {
		// Every consumer has read its terminal, so every token and
		// terminal has left its batcher; control that is still in flight
		// (late credit replies) is not counted.
		res.wakes, res.counting, res.muxed = wc.wakes().sub(wakes0), true, wc.muxed()
	}
	engines.Wait()
	if firstErr != nil {
		return firstErr
	}
	if err := context.Cause(ctx); err != nil {
		return err
	}
	if vp, ok := plane.(*veloPlane); ok {
		if err := checkAttaches(vp.attachTaps != nil, vp.veloEngines.zeroRTT, vp.attaches(), n); err != nil {
			return err
		}
	}
	res.ttft, res.tokLat = times.ttft, times.tokLat
	addRPResult(r, cfg, arm, params, res)
	return nil
}

// rpResult is what one arm of one rep measured.
type rpResult struct {
	wall time.Duration
	cpu  time.Duration // all frontends and engines
	// procs: frontCPU and engineCPU are each side's processes (cpu is
	// their sum).
	procs               bool
	frontCPU, engineCPU time.Duration
	writes              uint64     // write system calls of both sides
	engineSys           rpSyscalls // procs: the engines' system calls and switches
	// wakes are the velo arms' counters (counting); muxed says whether
	// the batcher's apply.
	wakes           rpWakes
	counting, muxed bool
	ttft, tokLat    []int64 // nanoseconds
}

// addRPResult adds the figures of one arm's rep.
func addRPResult(r *Report, cfg ResponsePlaneConfig, arm string, params map[string]any, res rpResult) {
	n, wall := float64(cfg.Requests), res.wall.Seconds()
	tokens := float64(cfg.Requests * cfg.Tokens)
	perToken := func(d time.Duration) float64 { return float64(d.Nanoseconds()) / tokens / 1e3 }
	r.Add(responsePlaneHarness, arm, "requests_per_s", "per_s", n/wall, params)
	r.Add(responsePlaneHarness, arm, "tokens_per_s", "per_s", tokens/wall, params)
	r.Add(responsePlaneHarness, arm, "cpu_us_per_token", "us", perToken(res.cpu), params)
	if res.procs {
		r.Add(responsePlaneHarness, arm, "frontend_cpu_us_per_token", "us", perToken(res.frontCPU), params)
		r.Add(responsePlaneHarness, arm, "engine_cpu_us_per_token", "us", perToken(res.engineCPU), params)
	}
	if res.writes > 0 {
		r.Add(responsePlaneHarness, arm, "tokens_per_write", "ratio", tokens/float64(res.writes), params)
	}
	if res.procs {
		// Counts of the engines' processes per token: what the sending side
		// pays the kernel, unlike CPU time unmoved by a busy machine.
		es := res.engineSys
		r.Add(responsePlaneHarness, arm, "engine_writes_per_token", "ratio", float64(es.Writes)/tokens, params)
		r.Add(responsePlaneHarness, arm, "engine_reads_per_token", "ratio", float64(es.Reads)/tokens, params)
		r.Add(responsePlaneHarness, arm, "engine_vol_switches_per_token", "ratio", float64(es.VolSwitches)/tokens, params)
	}
	if res.counting {
		w := res.wakes
		// Wakes per token: the engines' batchers per token sent, the
		// frontends' consumers per token read. The per-stream path has
		// no batcher, so it reports the consumers alone.
		if res.muxed {
			r.Add(responsePlaneHarness, arm, "engine_batcher_wakes_per_token", "ratio", float64(w.EngineBatcher)/tokens, params)
			r.Add(responsePlaneHarness, arm, "frontend_batcher_wakes_per_token", "ratio", float64(w.HostBatcher)/tokens, params)
			// Batches per token: the engines' carry tokens (and opens
			// and closes), the frontends' carry credit replies and closes.
			r.Add(responsePlaneHarness, arm, "engine_batches_per_token", "ratio", float64(w.EngineBatches)/tokens, params)
			r.Add(responsePlaneHarness, arm, "frontend_batches_per_token", "ratio", float64(w.HostBatches)/tokens, params)
			r.Add(responsePlaneHarness, arm, "credit_exhausted_count", "count", float64(w.CreditExhausted), params)
		}
		r.Add(responsePlaneHarness, arm, "consumer_wakes_per_token", "ratio", float64(w.HostConsumer)/tokens, params)
	}
	if cfg.Samples != nil {
		cfg.Samples.add(arm, res.ttft, res.tokLat)
	}
	addQuantiles(r, arm, "ttft_", "ms", 1e6, res.ttft, []float64{0.5, 0.95, 0.99}, params)
	addQuantiles(r, arm, "token_latency_", "us", 1e3, res.tokLat, []float64{0.5, 0.95, 0.99}, params)
}

// addQuantiles adds prefix+"pNN_"+unit for each q of ns (nanoseconds),
// divided by div.
func addQuantiles(r *Report, arm, prefix, unit string, div float64, ns []int64, qs []float64, params map[string]any) {
	s := slices.Clone(ns)
	slices.Sort(s)
	for _, q := range qs {
		v := float64(s[int(q*float64(len(s)-1))]) / div
		r.Add(responsePlaneHarness, arm, fmt.Sprintf("%sp%d_%s", prefix, int(q*100+0.5), unit), unit, v, params)
	}
}

// writeSyscalls is the write system calls this process has made
// (/proc/self/io syscw: write, writev and their kin), or 0 where that
// file is missing. In-process both ends of every arm live in this
// process, so a delta counts the writes of frontends and engines, control
// included; under --procs each child counts its own.
// rpSyscalls are a process's system calls that move bytes and its
// voluntary context switches (a thread that slept: a futex or poll wait).
type rpSyscalls struct {
	Reads       uint64 `json:"reads"`
	Writes      uint64 `json:"writes"`
	VolSwitches uint64 `json:"vol_switches"`
}

func (s rpSyscalls) sub(o rpSyscalls) rpSyscalls {
	return rpSyscalls{Reads: s.Reads - o.Reads, Writes: s.Writes - o.Writes, VolSwitches: s.VolSwitches - o.VolSwitches}
}

func (s rpSyscalls) add(o rpSyscalls) rpSyscalls {
	return rpSyscalls{Reads: s.Reads + o.Reads, Writes: s.Writes + o.Writes, VolSwitches: s.VolSwitches + o.VolSwitches}
}

// takeSyscalls reads this process's counters (Linux; zeros elsewhere).
func takeSyscalls() rpSyscalls {
	var s rpSyscalls
	if b, err := os.ReadFile("/proc/self/io"); err == nil {
		for _, line := range strings.Split(string(b), "\n") {
			if v, ok := strings.CutPrefix(line, "syscr:"); ok {
				s.Reads, _ = strconv.ParseUint(strings.TrimSpace(v), 10, 64)
			}
			if v, ok := strings.CutPrefix(line, "syscw:"); ok {
				s.Writes, _ = strconv.ParseUint(strings.TrimSpace(v), 10, 64)
			}
		}
	}
	var ru syscall.Rusage
	if syscall.Getrusage(syscall.RUSAGE_SELF, &ru) == nil {
		s.VolSwitches = uint64(ru.Nvcsw)
	}
	return s
}

func writeSyscalls() uint64 {
	b, err := os.ReadFile("/proc/self/io")
	if err != nil {
		return 0
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "syscw:"); ok {
			n, _ := strconv.ParseUint(strings.TrimSpace(v), 10, 64)
			return n
		}
	}
	return 0
}
