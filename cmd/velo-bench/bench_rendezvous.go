package main

import (
	"flag"
	"strconv"
	"strings"

	"github.com/velo-go/velo/cmd/velo-bench/internal/bench"
)

func init() {
	extraHarnesses["rendezvous"] = func(fs *flag.FlagSet, r *bench.Report, reps *int) func() error {
		sizes := fs.String("sizes", "64KiB,1MiB,16MiB,64MiB", "payload sizes (KiB and MiB suffixes)")
		perSize := fs.Int("mib", 512, "MiB moved per size, arm and rep (at least 3 transfers)")
		arms := fs.String("arms", "raw,get,unary", "arms to run")
		return func() error {
			var ns []int
			for _, s := range strings.Split(*sizes, ",") {
				n, err := parseSize(s)
				if err != nil {
					return err
				}
				ns = append(ns, n)
			}
			return bench.Rendezvous(bench.RendezvousConfig{
				Sizes: ns, Bytes: *perSize << 20, Reps: *reps, Arms: strings.Split(*arms, ","),
			}, r)
		}
	}
}

// parseSize reads "64KiB", "16MiB" or a plain byte count.
func parseSize(s string) (int, error) {
	s = strings.TrimSpace(s)
	mul := 1
	switch {
	case strings.HasSuffix(s, "KiB"):
		mul, s = 1<<10, strings.TrimSuffix(s, "KiB")
	case strings.HasSuffix(s, "MiB"):
		mul, s = 1<<20, strings.TrimSuffix(s, "MiB")
	}
	n, err := strconv.Atoi(s)
	return n * mul, err
}
