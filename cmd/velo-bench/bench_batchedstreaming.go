package main

import (
	"flag"
	"os"
	"time"

	"github.com/velo-go/velo/cmd/velo-bench/internal/bench"
)

func init() {
	extraHarnesses["batched-streaming"] = func(fs *flag.FlagSet, r *bench.Report, reps *int) func() error {
		hosts := fs.Int("anchor-hosts", 3, "frontends: nodes that own the response streams")
		engines := fs.Int("engines", 2, "engines: nodes that run continuous batching and stream tokens")
		requests := fs.Int("requests", 24, "requests per rep, one response stream each")
		maxBatch := fs.Int("max-batch", 8, "active requests one engine holds at once")
		tokens := fs.Int("tokens", 40, "longest response in tokens; request i has 1 + (7i mod tokens), as in the Rust reference's batched_streaming example, unless --uniform")
		uniform := fs.Bool("uniform", false, "give every request --tokens tokens")
		delay := fs.Float64("pass-delay-ms", 1, "gap between an engine's forward passes, in milliseconds")
		flush := fs.String("flush-policy", "manual", "engines' mux flush policy: manual (FlushBatch once per forward pass) or auto (velo's default); ignored with --legacy")
		credit := fs.Uint("initial-credit", 0, "per-stream credit window (0: velo's default, 32)")
		legacy := fs.Bool("legacy", false, "run the same workload on the per-stream path (the mux off)")
		verbose := fs.Bool("v", true, "print each rep's counts to stderr")
		timeout := fs.Duration("timeout", 2*time.Minute, "fail a rep that takes longer")
		return func() error {
			cfg := bench.BatchedStreamingConfig{
				AnchorHosts: *hosts, Engines: *engines, Requests: *requests, MaxBatch: *maxBatch,
				Tokens: *tokens, Uniform: *uniform, PassDelay: time.Duration(*delay * float64(time.Millisecond)),
				Flush: *flush, InitialCredit: uint32(*credit), Legacy: *legacy, Reps: *reps, Timeout: *timeout,
			}
			if *verbose {
				cfg.Log = os.Stderr
			}
			return bench.BatchedStreaming(cfg, r)
		}
	}
}
