package main

import (
	"flag"
	"strings"

	"github.com/velo-go/velo/cmd/velo-bench/internal/bench"
)

func init() {
	extraHarnesses["ping-pong"] = func(fs *flag.FlagSet, r *bench.Report, reps *int) func() error {
		transport := fs.String("transport", "tcp", "tcp, tls (TCP with mutual TLS) or uds, for every arm (the grpc arm and the raw socket too); a comma-separated list runs every arm on each and adds each arm's ratio to the first transport")
		payload := fs.Int("payload", 64, "payload bytes")
		iters := fs.Int("iters", 20000, "round trips per arm and rep")
		arms := fs.String("arms", "raw,velo,velo-inline,velo-async,grpc", "arms to run")
		return func() error {
			return bench.PingPong(bench.PingPongConfig{
				Transport: *transport, Payload: *payload, Iters: *iters, Reps: *reps,
				Arms: strings.Split(*arms, ","),
			}, r)
		}
	}
}
