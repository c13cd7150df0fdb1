package main

import (
	"flag"
	"fmt"
	"strconv"

	"github.com/velo-go/velo/cmd/velo-bench/internal/bench"
)

func init() {
	extraHarnesses["mpsc-fanin"] = func(fs *flag.FlagSet, r *bench.Report, reps *int) func() error {
		producers := fs.String("producers", "1,2,8,64", "comma-separated producer counts, one arm (p<N>) each, rotated per rep")
		items := fs.Int("items", 1000000, "items per arm and rep, split evenly over the producers")
		payload := fs.Int("payload", 16, "bytes in each item")
		capacity := fs.Int("capacity", 256, "the anchor's inlet capacity")
		return func() error {
			var ps []int
			for _, s := range splitList(*producers) {
				p, err := strconv.Atoi(s)
				if err != nil {
					return fmt.Errorf("--producers: %w", err)
				}
				ps = append(ps, p)
			}
			return bench.MPSCFanin(bench.MPSCFaninConfig{
				Producers: ps, Items: *items, Payload: *payload, Capacity: *capacity, Reps: *reps,
			}, r)
		}
	}
}
