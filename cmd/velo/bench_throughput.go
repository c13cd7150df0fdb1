package main

import (
	"flag"
	"fmt"
	"strconv"
	"strings"

	"github.com/velo-go/velo/cmd/velo/internal/bench"
)

func init() {
	extraHarnesses["throughput"] = func(fs *flag.FlagSet, r *bench.Report, reps *int) func() error {
		level := fs.String("level", "transport,messenger",
			"transport (frames through the transport, against a raw socket), messenger (calls and messages through velo.Node, against raw and grpc), or both")
		transport := fs.String("transport", "tcp", "tcp or uds")
		// Transport level.
		sizes := fs.String("sizes", "64,65536", "transport level: comma-separated frame payload sizes in bytes")
		modes := fs.String("modes", "pipelined,inflight", "transport level: pipelined and/or inflight")
		inflight := fs.Int("inflight", 64, "transport level: requests outstanding in the inflight mode")
		mib := fs.Int("mib", 1024, "transport level: MiB moved per pipelined run")
		frames := fs.Int("frames", 2000000, "transport level: frames per pipelined run at most")
		calls := fs.Int("calls", 200000, "transport level: round trips per inflight run at most")
		// Messenger level.
		msgConfig := msgThroughputFlags(fs, transport, reps)
		return func() error {
			levels := msgSplitList(*level)
			if len(levels) == 0 {
				return fmt.Errorf("--level names no level (want transport, messenger or both)")
			}
			var mcfg bench.MsgThroughputConfig
			for _, l := range levels {
				switch l {
				case "transport":
				case "messenger":
					// Check the messenger flags before a long transport run.
					var err error
					if mcfg, err = msgConfig(); err != nil {
						return err
					}
				default:
					return fmt.Errorf("unknown level %q (want transport, messenger or both)", l)
				}
			}
			for _, l := range levels {
				if l == "messenger" {
					if err := bench.MsgThroughput(mcfg, r); err != nil {
						return err
					}
					continue
				}
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
				if err := bench.Throughput(cfg, r); err != nil {
					return err
				}
			}
			return nil
		}
	}
}
