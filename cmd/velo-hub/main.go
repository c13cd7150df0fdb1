// Command velo-hub is the hub as a program to deploy: discovery,
// liveness and the service directory of a velo application, on an
// in-memory store or on etcd, whose registrations survive a restart.
//
//	velo-hub --config hub.json
//	velo-hub --config hub.json --embedded-etcd ./hub-data   # a single-box trial
//	velo-hub --config hub.json --check                      # validate and exit
//
// hub.json is the hub's Config (public_addr, control_addr,
// heartbeat_interval_ms, ...) plus a "store" and a "velo" section:
//
//	{
//	  "public_addr": ":1337", "control_addr": ":8337",
//	  "store": {"kind": "etcd", "endpoints": ["etcd-1:2379"], "prefix": "/velo-hub/default",
//	            "wait_for_prefix": true},
//	  "velo": {"listen_addr": ":7337"}
//	}
//
// SIGINT or SIGTERM stops the hub in order (hub.Hub.Shutdown) and exits
// 0; a second signal exits at once with status 1. See docs/hub.md,
// "Deploying". It lives apart from cmd/velo because it links the etcd
// client and server, which `velo` must not compile.
package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
)

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

// run is the program; its result is the exit status: 0 after a clean
// stop (or --check, or --help), 2 for a bad command line, 1 for any
// other failure.
func run(args []string, stdout, stderr io.Writer) int {
	o, err := parseFlags(args, stderr)
	if errors.Is(err, flag.ErrHelp) {
		return 0
	}
	if err != nil {
		fmt.Fprintln(stderr, "velo-hub:", err)
		return 2
	}
	log, err := newLogger(o, stderr)
	if err != nil {
		fmt.Fprintln(stderr, "velo-hub:", err)
		return 2
	}
	file, err := loadConfig(o)
	if err != nil {
		fmt.Fprintln(stderr, "velo-hub:", err)
		return 1
	}
	if o.check {
		fmt.Fprintf(stdout, "velo-hub: %s is valid (store %s)\n", o.config, file.Store.Kind)
		return 0
	}
	if err := serve(o, file, log); err != nil {
		log.Error("velo-hub stopped", "err", err)
		fmt.Fprintln(stderr, "velo-hub:", err)
		return 1
	}
	return 0
}
