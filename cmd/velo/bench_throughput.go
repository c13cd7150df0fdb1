package main

import (
	"flag"
	"strconv"
	"strings"

	"github.com/velo-go/velo/internal/bench"
)

func init() {
	extraHarnesses["throughput"] = func(fs *flag.FlagSet, r *bench.Report, reps *int) func() error {
		transport := fs.String("transport", "tcp", "tcp or uds")
		sizes := fs.String("sizes", "64,65536", "comma-separated frame payload sizes in bytes")
		modes := fs.String("modes", "pipelined,inflight", "pipelined and/or inflight")
		inflight := fs.Int("inflight", 64, "requests outstanding in the inflight mode")
		mib := fs.Int("mib", 1024, "MiB moved per pipelined run")
		frames := fs.Int("frames", 2000000, "frames per pipelined run at most")
		calls := fs.Int("calls", 200000, "round trips per inflight run at most")
		return func() error {
			cfg := bench.ThroughputConfig{
				Transport: *transport, Modes: strings.Split(*modes, ","), InFlight: *inflight,
				Bytes: int64(*mib) << 20, MaxFrames: *frames, Calls: *calls, Reps: *reps,
			}
			for _, s := range strings.Split(*sizes, ",") {
				n, err := strconv.Atoi(strings.TrimSpace(s))
				if err != nil {
					return err
				}
				cfg.Sizes = append(cfg.Sizes, n)
			}
			return bench.Throughput(cfg, r)
		}
	}
}
