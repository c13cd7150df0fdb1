package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/velo-go/velo/cmd/velo-bench/internal/soak"
)

const soakUsage = `usage: velo-bench soak messenger|stream|rendezvous|all [flags]
       (also: velo soak ...)

Nodes in child processes run the workload against each other; an oracle
checks that no item is lost, duplicated, reordered or corrupted, and the
RSS and goroutine slopes after warm-up stay within the tier's bounds.
Exits non-zero when a check fails.`

// runSoak is `velo-bench soak`.
func runSoak(args []string) error {
	if len(args) > 0 && args[0] == soak.ChildFlag {
		// A child: its stdout is the protocol.
		if err := soak.Child(os.Stdin, os.Stdout); err != nil {
			fmt.Fprintln(os.Stderr, "velo-bench soak child:", err)
			os.Exit(1)
		}
		os.Exit(0)
	}
	fs := flag.NewFlagSet("soak", flag.ContinueOnError)
	transport := fs.String("transport", "tcp", "tcp, quic or grpc (--faults: tcp or grpc)")
	tierName := fs.String("tier", "ci", "ci (35 s a workload), nightly (10 min), long (2 h), test (5 s, no trend bounds)")
	faults := fs.Bool("faults", false, "put a fault-injection proxy in front of every node: drop, reset, pause and blackhole on a seeded schedule")
	kinds := fs.String("fault-kinds", "drop,pause,blackhole,reset", "--faults: the kinds of fault to inject")
	seed := fs.Uint64("seed", 1, "seed of the workload and the fault schedule")
	children := fs.Int("children", 2, "child processes, one node each (at least 2)")
	duration := fs.Duration("duration", 0, "override the tier's duration a workload")
	plot := fs.String("plot", "", "write an SVG plot of latency and RSS over time to this file")
	fs.Usage = func() { fmt.Fprintln(fs.Output(), soakUsage); fs.PrintDefaults() }
	if len(args) == 0 || args[0] == "-h" || args[0] == "--help" {
		fs.Usage()
		if len(args) == 0 {
			return errors.New("soak needs a workload")
		}
		return flag.ErrHelp
	}
	workload := args[0]
	if err := fs.Parse(args[1:]); err != nil {
		return err
	}
	tier, err := soak.TierByName(*tierName)
	if err != nil {
		return err
	}
	if *duration > 0 {
		tier.Duration = *duration
		tier.Warmup = min(tier.Warmup, *duration/3)
	}
	fk, err := soak.ParseFaultKinds(*kinds)
	if err != nil {
		return err
	}
	cfg := soak.Config{Workload: workload, Transport: *transport, Tier: tier, Faults: *faults, FaultKinds: fk, Seed: *seed, Children: *children}
	if soak.IsTerminal(os.Stdout) {
		cfg.Progress = os.Stdout
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	start := time.Now()
	res, err := soak.Run(ctx, cfg)
	if len(res) > 0 {
		soak.WriteSummary(os.Stdout, tier, *faults, res)
		fmt.Printf("total %s\n", time.Since(start).Round(time.Second))
		if *plot != "" {
			if perr := soak.WritePlotFile(*plot, res); perr != nil {
				return perr
			}
			fmt.Println("plot:", *plot)
		}
	}
	return err
}
