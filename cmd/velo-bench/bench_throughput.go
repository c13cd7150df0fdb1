package main

import (
	"flag"
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/velo-go/velo/cmd/velo-bench/internal/bench"
)

func init() {
	extraHarnesses["throughput"] = func(fs *flag.FlagSet, r *bench.Report, reps *int) func() error {
		level := fs.String("level", "transport,messenger",
			"transport (frames through the transport, against a raw socket), messenger (calls and messages through velo.Node, against raw and grpc), or both")
		transport := fs.String("transport", "tcp", "tcp, tls (TCP with mutual TLS) or uds; at the transport level a comma-separated list runs every arm on each and adds each arm's ratio to the first transport")
		// Transport level.
		sizes := fs.String("sizes", "64,65536", "transport level: comma-separated frame payload sizes in bytes")
		modes := fs.String("modes", "pipelined,inflight", "transport level: pipelined and/or inflight; stream runs the stream mode (byte items over the messenger mux, see --lanes), alone unless --level is given too")
		inflight := fs.Int("inflight", 64, "transport level: requests outstanding in the inflight mode")
		mib := fs.Int("mib", 1024, "transport level: MiB moved per pipelined run")
		frames := fs.Int("frames", 2000000, "transport level: frames per pipelined run at most")
		calls := fs.Int("calls", 200000, "transport level: round trips per inflight run at most")
		// Stream mode.
		lanes := fs.String("lanes", "1,4", "stream mode: comma-separated lane counts, one arm each (both nodes' TCP transports built WithLanes(n)); ratios are to the first")
		streams := fs.String("streams", "16,64,256", "stream mode: comma-separated counts of concurrent streams")
		itemBytes := fs.Int("item-bytes", 16384, "stream mode: bytes per item")
		duration := fs.Duration("duration", 3*time.Second, "stream mode: how long the producers send in one run")
		// Messenger level.
		msgConfig := msgThroughputFlags(fs, transport, reps)
		return func() error {
			levelSet := false
			fs.Visit(func(f *flag.Flag) { levelSet = levelSet || f.Name == "level" })
			var rest []string
			stream := false
			for _, m := range strings.Split(*modes, ",") {
				switch m = strings.TrimSpace(m); m {
				case "stream":
					stream = true
				case "":
				default:
					rest = append(rest, m)
				}
			}
			var scfg bench.StreamThroughputConfig
			if stream {
				scfg = bench.StreamThroughputConfig{Transport: *transport, ItemBytes: *itemBytes, Duration: *duration, Reps: *reps, Log: os.Stderr}
				var err error
				if scfg.Lanes, err = intList(*lanes); err != nil {
					return fmt.Errorf("--lanes: %w", err)
				}
				if scfg.Streams, err = intList(*streams); err != nil {
					return fmt.Errorf("--streams: %w", err)
				}
				if err := scfg.Validate(); err != nil {
					return err
				}
				if *transport != "tcp" && *transport != "quic" {
					return fmt.Errorf("stream mode runs on tcp or quic (the transports with lanes), not %q", *transport)
				}
			}
			levels := msgSplitList(*level)
			if stream && !levelSet {
				// --modes stream alone runs the stream mode alone.
				levels = nil
				if len(rest) > 0 {
					levels = []string{"transport"}
				}
			}
			if len(levels) == 0 && !stream {
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
				if l == "transport" && len(rest) == 0 {
					continue // only the stream mode was asked for
				}
				if l == "messenger" {
					if err := bench.MsgThroughput(mcfg, r); err != nil {
						return err
					}
					continue
				}
				cfg := bench.ThroughputConfig{
					Transport: *transport, Modes: rest, InFlight: *inflight,
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
			if stream {
				return bench.StreamThroughput(scfg, r)
			}
			return nil
		}
	}
}

// intList parses comma-separated integers.
func intList(s string) ([]int, error) {
	var out []int
	for _, f := range strings.Split(s, ",") {
		if f = strings.TrimSpace(f); f == "" {
			continue
		}
		n, err := strconv.Atoi(f)
		if err != nil {
			return nil, err
		}
		out = append(out, n)
	}
	return out, nil
}
