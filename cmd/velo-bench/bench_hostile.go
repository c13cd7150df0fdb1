package main

import (
	"flag"
	"os"
	"time"

	"github.com/velo-go/velo/cmd/velo-bench/internal/bench"
)

func init() {
	extraHarnesses["hostile"] = func(fs *flag.FlagSet, r *bench.Report, reps *int) func() error {
		cases := fs.String("cases", "", "comma-separated cases (default all): control, control-answered, forged-close-as-producer, epoch-max-as-producer, forged-credit-as-consumer, forged-close-as-consumer, forged-event-trigger, credit-ignoring-producer, stranger-openslot, stranger-openslot-2000-ids, guessed-rv-payload, guessed-rv-transfer, guessed-mux-slot-tag, hostile-owner-1tib, fuzz")
		streams := fs.Int("streams", 20, "legit streams per direction")
		pace := fs.Int("pace-us", 20000, "a legit producer's pause between items, in microseconds")
		fuzz := fs.Duration("fuzz-duration", 60*time.Second, "how long the fuzzer sends")
		rate := fs.Int("fuzz-rate", 10000, "fuzzer frames per second")
		scale := fs.Float64("scale", 1, "multiply the frames of the flood cases")
		seed := fs.Int64("seed", 0, "the fuzzer's seed (0: a new one per rep, printed in the table)")
		verbose := fs.Bool("v", true, "print progress and, per rep, the must-show table to stderr")
		echo := fs.Bool("echo", false, "copy the node processes' stderr to stderr")
		return func() error {
			cfg := bench.HostileConfig{
				Cases: splitList(*cases), Streams: *streams, PaceUS: *pace, FuzzDuration: *fuzz, FuzzRate: *rate,
				Scale: *scale, Seed: *seed, Reps: *reps,
			}
			if *verbose {
				cfg.Log = os.Stderr
			}
			if *echo {
				cfg.Echo = os.Stderr
			}
			return bench.Hostile(cfg, r)
		}
	}
}
