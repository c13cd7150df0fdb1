package main

import (
	"flag"
	"strings"

	"github.com/velo-go/velo/cmd/velo-bench/internal/bench"
)

func init() {
	extraHarnesses["events"] = func(fs *flag.FlagSet, r *bench.Report, reps *int) func() error {
		transport := fs.String("transport", "tcp", "tcp or uds")
		arms := fs.String("arms", strings.Join(bench.EventsArms, ","),
			"local (create+trigger+wait in one goroutine), remote (trigger-to-wake and wait round trip across two nodes), many-waiters (one remote event, --waiters waiters)")
		n := fs.Int("events", 1000000, "local: events per rep")
		iters := fs.Int("iters", 2000, "remote: timed waits per rep and metric")
		waiters := fs.Int("waiters", 1000, "many-waiters: waiters on one remote event")
		rounds := fs.Int("rounds", 20, "many-waiters: events per rep")
		return func() error {
			var armList []string
			for _, a := range strings.Split(*arms, ",") {
				if a = strings.TrimSpace(a); a != "" {
					armList = append(armList, a)
				}
			}
			return bench.Events(bench.EventsConfig{
				Transport: *transport, Events: *n, Iters: *iters, Waiters: *waiters, Rounds: *rounds,
				Reps: *reps, Arms: armList,
			}, r)
		}
	}
}
