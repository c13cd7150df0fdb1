// Command velo runs the velo demo and the benchmark harnesses.
//
//	velo demo
//	velo bench <harness> [flags]
package main

import (
	"fmt"
	"os"
)

func main() {
	if err := run(os.Args[1:]); err != nil {
		fmt.Fprintln(os.Stderr, "velo:", err)
		os.Exit(1)
	}
}

const usage = `usage:
  velo demo [--discovery etcd|nats]
                            run the two-node demo (optionally finding peers
                            through an embedded etcd or nats-server)
  velo bench <harness>      run a benchmark harness; harnesses:
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
      response-plane        frontends and continuous-batching engines: mux, per-stream
                            and grpc-go (TTFT, token latency, tokens/s, CPU per token)
      batched-streaming     anchor hosts and engines: tokens per wire write on the mux
                            (manual or auto flush) or the per-stream path (--legacy)
      first-token           one lone stream at a time over the mux: send -> read of its
                            first token under FlushAuto, FlushLinger and OnComplete
      hostile               the attacks of issue 20 between processes: victim CPU
                            per hostile frame, CPU after, heap, legit streams
  velo bench <harness> -h   flags of a harness`

func run(args []string) error {
	if len(args) == 0 {
		fmt.Println(usage)
		return nil
	}
	switch args[0] {
	case "demo":
		return runDemo(args[1:])
	case "bench":
		return runBench(args[1:])
	case "help", "-h", "--help":
		fmt.Println(usage)
		return nil
	}
	return fmt.Errorf("unknown command %q\n%s", args[0], usage)
}
