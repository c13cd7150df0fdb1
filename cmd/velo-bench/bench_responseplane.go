package main

import (
	"flag"
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/velo-go/velo/cmd/velo-bench/internal/bench"
)

func init() {
	extraHarnesses["response-plane"] = func(fs *flag.FlagSet, r *bench.Report, reps *int) func() error {
		arms := fs.String("arms", "mux,per-stream,grpc", "comma-separated arms, interleaved per rep: mux (velo over the messenger mux), mux-zero-rtt (the mux, streams opened from tickets minted at request registration: no attach round trip), per-stream (velo with the mux off), grpc (grpc-go server streaming) and raw (no protocol: one write per frontend per pass, tokens handed to consumers over channels; a floor, not a design)")
		hosts := fs.Int("anchor-hosts", 2, "frontends: nodes that own the response streams")
		engines := fs.Int("engines", 4, "engines: nodes that run continuous batching and stream tokens")
		requests := fs.Int("requests", 2000, "requests per arm and rep, one response stream each")
		maxBatch := fs.Int("max-batch", 32, "active requests one engine holds at once")
		tokens := fs.Int("tokens", 64, "tokens in every response (40 bytes each)")
		delay := fs.Float64("pass-delay-ms", 0, "gap between an engine's forward passes, in milliseconds")
		flush := fs.String("flush-policy", "auto", "mux arms, engines: auto (velo's default: write at every batcher wake), manual (FlushBatch once per forward pass) or auto-linger (FlushLinger: hold data up to --linger-us)")
		linger := fs.Int("linger-us", 0, "auto-linger: the window MaxLinger in microseconds (0: velo's default, 2000)")
		onComplete := fs.Bool("on-complete", false, "auto-linger: end the window once every live slot has a record staged")
		atBytes := fs.Int("at-bytes", 0, "auto-linger: end the window once this many bytes are staged (0: no limit)")
		frontFlush := fs.String("frontend-flush-policy", "auto", "mux arm: flush policy of the anchor hosts, which send only credit replies and never call FlushBatch")
		credit := fs.Uint("initial-credit", 0, "mux arm: per-stream credit window (0: velo's default, 32)")
		lanes := fs.Int("lanes", 1, "velo arms: build every node's TCP transport WithLanes(n), so the mux may spread a peer's streams over up to n connections (1..16)")
		timeout := fs.Duration("timeout", 10*time.Minute, "fail an arm's rep that takes longer")
		plotPath := fs.String("plot", "", "draw the TTFT and token-latency CDFs of every arm (pooled over the reps) into this .png or .svg file")
		procs := fs.Bool("procs", false, "run every frontend and every engine as a child process of its own (this binary again; --engine-procs and --frontend-procs group them) over loopback TCP, requests dispatched over a control connection; adds frontend_cpu_us_per_token and engine_cpu_us_per_token (each side's processes over the window) to cpu_us_per_token (their sum), or with --concurrency the _per_request figures")
		concurrency := fs.Int("concurrency", 0, "run a closed loop instead of a batch of --requests: keep this many requests open, each frontend starting its next as soon as one of its own is read whole, for --warmup then the measured --duration; then dispatch stops and the open requests drain (0: the batch)")
		warmup := fs.Duration("warmup", 2*time.Second, "closed loop: run this long before the measured window")
		duration := fs.Duration("duration", 5*time.Second, "closed loop: the measured window")
		engineProcs := fs.Int("engine-procs", 0, "--procs: spread the engines over this many child processes, an equal share of nodes each (0: one per engine)")
		frontendProcs := fs.Int("frontend-procs", 0, "--procs: spread the frontends over this many child processes, an equal share each (0: one per frontend)")
		childProfile := fs.String("child-cpuprofile", "", "--procs: every child writes a CPU profile of its life to PREFIX.<arm>.<role><index>.<pid> (100 Hz: a short run gives few samples; perf record -g over the parent sees the children too)")
		shape := fs.String("shape", "", "a preset for the flags not given: serving is an LLM serving shape, --procs --concurrency 2048 --engines 16 --engine-procs 4 --max-batch 128 --tokens 64 --pass-delay-ms 5")
		// The role of a --procs child: set by the parent, left out of -h.
		role := fs.String("rp-role", "", "")
		index := fs.Int("rp-index", 0, "")
		childArm := fs.String("rp-arm", "", "")
		fs.Usage = func() { printFlagsExcept(fs, "rp-") }
		return func() error {
			if *role != "" {
				// A child: its stdout is the protocol, so it never
				// returns to print a table.
				if err := bench.ResponsePlaneChild(*role, *index, *childArm, os.Stdin, os.Stdout); err != nil {
					fmt.Fprintln(os.Stderr, "velo-bench response-plane:", err)
					os.Exit(1)
				}
				os.Exit(0)
			}
			if err := applyShape(fs, *shape); err != nil {
				return err
			}
			cfg := bench.ResponsePlaneConfig{
				Arms: splitList(*arms), AnchorHosts: *hosts, Engines: *engines, Requests: *requests,
				MaxBatch: *maxBatch, Tokens: *tokens, PassDelay: time.Duration(*delay * float64(time.Millisecond)),
				Flush: *flush, LingerUS: *linger, OnComplete: *onComplete, AtBytes: *atBytes, FrontendFlush: *frontFlush, InitialCredit: uint32(*credit), Lanes: *lanes, Reps: *reps, Timeout: *timeout,
				Procs: *procs, Concurrency: *concurrency, Warmup: *warmup, Duration: *duration,
				EngineProcs: *engineProcs, FrontendProcs: *frontendProcs, ChildCPUProfile: *childProfile,
			}
			if *plotPath != "" {
				// Refuse a bad extension before the run, not after it.
				if _, err := bench.PlotFormat(*plotPath); err != nil {
					return err
				}
				cfg.Samples = &bench.ResponsePlaneSamples{}
			}
			if err := bench.ResponsePlane(cfg, r); err != nil {
				return err
			}
			if *plotPath == "" {
				return nil
			}
			mode := ""
			if *procs {
				mode = ", --procs"
			}
			load := fmt.Sprintf("%d requests", *requests)
			if *concurrency > 0 {
				load = fmt.Sprintf("%d open (closed loop, %v measured)", *concurrency, *duration)
			}
			title := fmt.Sprintf("response-plane%s: %d hosts, %d engines, %s × %d tokens, batch %d, pass delay %g ms, flush %s, %d reps",
				mode, *hosts, *engines, load, *tokens, *maxBatch, *delay, *flush, *reps)
			return bench.WriteResponsePlanePlot(*plotPath, title, cfg.Samples)
		}
	}
}

// rpShapes are the --shape presets: flag values set unless given on the
// command line.
var rpShapes = map[string][][2]string{
	// The serving shape: 2048 requests kept open over 16 engines
	// in 4 processes, each batching 128 at 5 ms a pass, 64 tokens each.
	"serving": {{"procs", "true"}, {"concurrency", "2048"}, {"engines", "16"}, {"engine-procs", "4"},
		{"max-batch", "128"}, {"tokens", "64"}, {"pass-delay-ms", "5"}},
}

// applyShape sets the flags of preset name that the command line left
// alone.
func applyShape(fs *flag.FlagSet, name string) error {
	if name == "" {
		return nil
	}
	preset, ok := rpShapes[name]
	if !ok {
		return fmt.Errorf("unknown shape %q (want serving)", name)
	}
	given := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { given[f.Name] = true })
	for _, kv := range preset {
		if !given[kv[0]] {
			if err := fs.Set(kv[0], kv[1]); err != nil {
				return err
			}
		}
	}
	return nil
}

// printFlagsExcept is a flag set's usage without the flags whose names
// start with prefix.
func printFlagsExcept(fs *flag.FlagSet, prefix string) {
	fmt.Fprintf(fs.Output(), "Usage of %s:\n", fs.Name())
	shown := flag.NewFlagSet(fs.Name(), flag.ContinueOnError)
	shown.SetOutput(fs.Output())
	fs.VisitAll(func(f *flag.Flag) {
		if !strings.HasPrefix(f.Name, prefix) {
			shown.Var(f.Value, f.Name, f.Usage)
			shown.Lookup(f.Name).DefValue = f.DefValue // what it was, not what was parsed so far
		}
	})
	shown.PrintDefaults()
}
