// Command velo-bench runs the benchmark harnesses, and the tour of call
// patterns with the nodes finding each other through an embedded etcd or
// nats-server. It is a binary of its own because those pull in etcd,
// nats-server, grpc-go and gonum/plot, which take minutes to compile; the
// light `velo` binary forwards `velo bench ...` and `velo demo --discovery
// ...` here.
//
//	velo-bench <harness> [flags]
//	velo-bench demo [--discovery etcd|nats]
package main

import (
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"os"
)

func main() {
	err := run(os.Args[1:])
	switch {
	case err == nil:
	case errors.Is(err, flag.ErrHelp): // the flag set printed the help
	default:
		fmt.Fprintln(os.Stderr, "velo-bench:", err)
		os.Exit(1)
	}
}

const usage = `usage:
  velo-bench <harness> [flags]   run a benchmark harness (also: velo bench <harness>)
  velo-bench <harness> -h        flags of a harness
  velo-bench soak messenger|stream|rendezvous|all [--transport tcp|quic|grpc]
                 [--tier ci|nightly|long] [--faults]
                                 the soak driver: nodes in child processes, an oracle
                                 for every item, RSS and goroutine trends, a fault
                                 proxy (also: velo soak ...)
  velo-bench demo [--discovery etcd|nats]
                                 the tour of call patterns between two nodes, with
                                 the nodes finding each other through an embedded
                                 etcd or nats-server (also: velo demo --discovery ...)
harnesses:
  tx-budget             one-way latency by layer (L0 raw .. L3 transport)
  throughput            transport frames/s and MiB/s against a raw socket;
                        messenger calls/s and msgs/s against raw and grpc-go
  ping-pong             unary round trip against raw TCP and grpc-go
  events                local event cost, remote wait latency, many waiters
  anchor-setup          unattached anchors (create time, goroutines, RSS);
                        same-worker stream lifecycles (rate, latency, CPU)
  stream-lifecycle      short streams, plain against awaiting Retired() or an ack,
                        same worker or per-stream TCP (rate, latency, CPU)
  mpsc-fanin            P producers into one same-worker MPSC anchor
                        (items/s, CPU per item)
  response-plane        frontends and continuous-batching engines: mux, per-stream,
                        grpc-go and raw (TTFT, token latency, tokens/s, CPU per token);
                        --procs: every frontend and engine its own process, CPU per
                        token split into the frontends' and the engines'
  batched-streaming     anchor hosts and engines: tokens per wire write on the mux
                        (manual or auto flush) or the per-stream path (--legacy)
  first-token           one lone stream at a time over the mux: send -> read of its
                        first token under FlushAuto, FlushLinger and OnComplete
  rendezvous            a payload moved by handle against a raw TCP transfer
  hostile               attacks by hostile peers between processes: victim CPU
                        per hostile frame, CPU after, heap, legit streams`

func run(args []string) error {
	// `velo bench ping-pong` arrives here as `bench ping-pong` when a user
	// types the velo spelling at this binary: both mean the same.
	if len(args) > 0 && args[0] == "bench" {
		args = args[1:]
	}
	if len(args) == 0 {
		fmt.Println(usage)
		return nil
	}
	switch args[0] {
	case "demo":
		return runDemo(args[1:])
	case "soak":
		return runSoak(args[1:])
	case "help", "-h", "--help":
		fmt.Println(usage)
		return nil
	}
	// A harness starts and stops dozens of nodes; their peer events
	// (Info) would bury the figures. Warnings still show.
	slog.SetLogLoggerLevel(slog.LevelWarn)
	return runBench(args)
}
