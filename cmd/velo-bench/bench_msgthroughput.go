package main

import (
	"flag"
	"fmt"
	"strings"

	"github.com/velo-go/velo/cmd/velo-bench/internal/bench"
)

// msgThroughputFlags adds the messenger-level flags of `velo bench
// throughput` and returns a function that builds the config once the flags
// are parsed. --transport and --reps are shared with the transport level.
func msgThroughputFlags(fs *flag.FlagSet, transport *string, reps *int) func() (bench.MsgThroughputConfig, error) {
	modes := fs.String("msg-modes", strings.Join(bench.MsgModes, ","),
		"messenger level: sequential (one unary call at a time), concurrent (--concurrency calls in flight), pipelined (fire-and-forget)")
	payload := fs.Int("payload", 64, "messenger level: payload bytes per call or message")
	concurrency := fs.Int("concurrency", 64, "messenger level: calls in flight in the concurrent mode")
	calls := fs.Int("msg-calls", 20000, fmt.Sprintf(
		"messenger level: timed calls per sequential run; concurrent runs make %dx, pipelined runs send %dx messages",
		bench.MsgOps("concurrent", 1), bench.MsgOps("pipelined", 1)))
	arms := fs.String("arms", strings.Join(bench.MsgArms, ","), "messenger level: arms to run (velo, raw, grpc; every arm runs over --transport)")
	return func() (bench.MsgThroughputConfig, error) {
		cfg := bench.MsgThroughputConfig{
			Transport: *transport, Modes: msgSplitList(*modes), Arms: msgSplitList(*arms),
			Payload: *payload, Concurrency: *concurrency, Calls: *calls, Reps: *reps,
		}
		return cfg, cfg.Validate()
	}
}

// msgSplitList splits a comma-separated flag, dropping blanks.
func msgSplitList(s string) []string {
	var out []string
	for _, p := range strings.Split(s, ",") {
		if p = strings.TrimSpace(p); p != "" {
			out = append(out, p)
		}
	}
	return out
}
