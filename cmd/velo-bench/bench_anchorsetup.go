package main

import (
	"flag"
	"strings"

	"github.com/velo-go/velo/cmd/velo-bench/internal/bench"
)

func init() {
	extraHarnesses["anchor-setup"] = func(fs *flag.FlagSet, r *bench.Report, reps *int) func() error {
		arms := fs.String("arms", strings.Join(bench.AnchorSetupArms, ","),
			"unattached (create --held anchors and hold them: create time, goroutines, RSS), lifecycle (--tasks x --streams same-worker lifecycles: rate, latency, CPU)")
		held := fs.Int("held", 200000, "unattached: anchors created and held")
		tasks := fs.Int("tasks", 64, "lifecycle: concurrent goroutines")
		streams := fs.Int("streams", 20000, "lifecycle: lifecycles per goroutine")
		return func() error {
			var armList []string
			for _, a := range strings.Split(*arms, ",") {
				if a = strings.TrimSpace(a); a != "" {
					armList = append(armList, a)
				}
			}
			return bench.AnchorSetup(bench.AnchorSetupConfig{
				Held: *held, Tasks: *tasks, Streams: *streams, Reps: *reps, Arms: armList,
			}, r)
		}
	}
}
