package main

import (
	"flag"
	"os"

	"github.com/velo-go/velo/cmd/internal/tour"
)

// runDemo runs the tour, with the nodes finding each other through an
// embedded backend when --discovery names one.
func runDemo(args []string) error {
	fs := flag.NewFlagSet("demo", flag.ContinueOnError)
	kind := fs.String("discovery", "", "find peers through an embedded etcd or nats-server (etcd|nats) instead of registering them by hand")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *kind == "" {
		return tour.Run(os.Stdout, nil)
	}
	d, err := startDemoDiscovery(*kind)
	if err != nil {
		return err
	}
	defer d.close()
	return tour.Run(os.Stdout, &tour.Discovery{About: d.about, Open: d.open})
}
