package main

import (
	"flag"
	"strings"

	"github.com/velo-go/velo/cmd/velo-bench/internal/bench"
)

func init() {
	extraHarnesses["stream-lifecycle"] = func(fs *flag.FlagSet, r *bench.Report, reps *int) func() error {
		path := fs.String("path", "same-worker", "same-worker (one manager), per-stream (a second velo node attaches over one TCP connection per stream) or mux (a second velo node over the messenger mux)")
		modes := fs.String("mode", "",
			"comma-separated arms, run side by side and rotated per rep: plain (move on after Finalize), retired (await Sender.Retired() taken after Finalize), "+
				"retired-early (Retired() taken before the first send), ack (await an active message the consumer sends once it read Finalized; per-stream only) (default every mode the path has)")
		streams := fs.Int("streams", 0, "measured lifecycles per arm and rep (default 200000 same-worker, 2000 per-stream)")
		conc := fs.Int("concurrency", 0, "goroutines running lifecycles at once (default 64 same-worker, 16 per-stream)")
		items := fs.Int("items", 1, "items in each stream")
		payload := fs.Int("payload", 16, "bytes in each item")
		warmup := fs.Int("warmup", -1, "lifecycles per arm and rep before the measured run (default streams/10)")
		return func() error {
			cfg := bench.StreamLifecycleConfig{
				Path: *path, Modes: splitList(*modes), Streams: *streams, Concurrency: *conc,
				Items: *items, Payload: *payload, Warmup: *warmup, Reps: *reps,
			}
			if len(cfg.Modes) == 0 {
				cfg.Modes = bench.StreamLifecycleModesFor(cfg.Path)
			}
			if cfg.Streams == 0 {
				cfg.Streams = 200000
				if cfg.Path != "same-worker" {
					cfg.Streams = 2000
				}
			}
			if cfg.Concurrency == 0 {
				cfg.Concurrency = 64
				if cfg.Path != "same-worker" {
					cfg.Concurrency = 16
				}
			}
			if cfg.Warmup < 0 {
				cfg.Warmup = cfg.Streams / 10
			}
			return bench.StreamLifecycle(cfg, r)
		}
	}
}

// splitList splits a comma-separated flag, dropping empty entries.
func splitList(s string) []string {
	var out []string
	for _, a := range strings.Split(s, ",") {
		if a = strings.TrimSpace(a); a != "" {
			out = append(out, a)
		}
	}
	return out
}
