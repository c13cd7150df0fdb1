package main

import (
	"flag"
	"time"

	"github.com/velo-go/velo/cmd/velo-bench/internal/bench"
)

func init() {
	extraHarnesses["first-token"] = func(fs *flag.FlagSet, r *bench.Report, reps *int) func() error {
		arms := fs.String("arms", "auto,linger,linger-complete", "comma-separated arms, their streams alternating one by one: auto (FlushAuto), linger (FlushLinger, --linger-us, no early end), linger-complete (FlushLinger with OnComplete)")
		setup := fs.String("setup", "ticket", "how each stream opens: ticket (the consumer pre-binds, the producer calls OpenAnchorStream) or attach (AttachAnchor)")
		streams := fs.Int("streams", 1000, "measured streams per arm and rep")
		linger := fs.Int("linger-us", 2000, "MaxLinger of the linger arms, in microseconds")
		gap := fs.Int("gap-us", 3000, "pause after every stream, in microseconds")
		timeout := fs.Duration("timeout", 10*time.Minute, "fail a rep that takes longer")
		return func() error {
			return bench.FirstToken(bench.FirstTokenConfig{
				Arms: splitList(*arms), Setup: *setup, Streams: *streams,
				Linger: time.Duration(*linger) * time.Microsecond, Gap: time.Duration(*gap) * time.Microsecond,
				Reps: *reps, Timeout: *timeout,
			}, r)
		}
	}
}
