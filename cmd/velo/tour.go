package main

import (
	"flag"
	"os"

	"github.com/velo-go/velo/cmd/internal/tour"
)

// runTour runs the in-process tour of call patterns. The same tour with an
// embedded discovery server is `velo demo --discovery ...` (velo-bench).
func runTour(args []string) error {
	fs := flag.NewFlagSet("tour", flag.ContinueOnError)
	if err := fs.Parse(args); err != nil {
		return err
	}
	return tour.Run(os.Stdout, nil)
}
