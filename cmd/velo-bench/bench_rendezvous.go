package main

import (
	"flag"
	"os"
	"strconv"
	"strings"

	"github.com/velo-go/velo/cmd/velo-bench/internal/bench"
)

func init() {
	extraHarnesses["rendezvous"] = func(fs *flag.FlagSet, r *bench.Report, reps *int) func() error {
		sizes := fs.String("sizes", "64KiB,1MiB,16MiB,64MiB", "payload sizes (KiB and MiB suffixes)")
		perSize := fs.Int("mib", 512, "MiB moved per size, arm and rep (at least 3 transfers)")
		arms := fs.String("arms", "", "arms to run (default raw,get,unary; with --procs rdma,rdma-shm,chunked,perftest)")
		path := fs.String("path", "chunked", "the path of the get arm in one process: chunked, or rdma (two nodes with UCX beside TCP; needs -tags ucx)")
		procs := fs.Bool("procs", false, "owner and consumer as two child processes over UCX beside TCP, with ucx_perftest's ucp_get as the floor (needs -tags ucx)")
		child := fs.String(bench.RendezvousChildFlag, "", "internal: serve as a child of a --procs run")
		return func() error {
			if *child != "" {
				return bench.RendezvousChild(*child, os.Stdin, os.Stdout)
			}
			var ns []int
			for _, s := range strings.Split(*sizes, ",") {
				n, err := parseSize(s)
				if err != nil {
					return err
				}
				ns = append(ns, n)
			}
			if *procs {
				a := "rdma,rdma-shm,chunked,perftest"
				if *arms != "" {
					a = *arms
				}
				return bench.RendezvousProcs(bench.RendezvousProcsConfig{
					Sizes: ns, Bytes: *perSize << 20, Reps: *reps, Arms: strings.Split(a, ","),
				}, r)
			}
			a := "raw,get,unary"
			if *arms != "" {
				a = *arms
			}
			return bench.Rendezvous(bench.RendezvousConfig{
				Sizes: ns, Bytes: *perSize << 20, Reps: *reps, Arms: strings.Split(a, ","), Path: *path,
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
