// Command velo runs the velo demo: two processes that find each other by
// service name.
//
//	velo demo
//	velo tour
//	velo hub --config hub.json | --demo
//	velo inspect [--watch] URL
//	velo bench <harness> [flags]
//
// It imports only the light packages (the velo core, its transports and
// file discovery), so that a first `go run ./cmd/velo demo` compiles in
// seconds. The benchmark harnesses and the demo with an embedded etcd or
// nats-server live in the velo-bench binary, which pulls in etcd,
// nats-server, grpc-go and gonum; `velo bench ...` and `velo demo
// --discovery ...` run it for you (see forward.go).
package main

import (
	"errors"
	"flag"
	"fmt"
	"os"
)

func main() {
	err := run(os.Args[1:])
	var code exitCode
	switch {
	case err == nil:
	case errors.As(err, &code):
		os.Exit(int(code))
	case errors.Is(err, flag.ErrHelp): // the flag set printed the help
		os.Exit(0)
	default:
		fmt.Fprintln(os.Stderr, "velo:", err)
		os.Exit(1)
	}
}

const usage = `usage:
  velo demo                 two processes find each other by service name:
                            this one starts a greeter process, finds it
                            through file discovery and calls it
  velo tour                 a tour of the call patterns (unary, sync, ordered,
                            deadlines, large payloads, events, streams, drain)
                            between two nodes in this process
  velo demo --discovery etcd|nats
                            the tour with the nodes finding each other through
                            an embedded etcd or nats-server (runs velo-bench)
  velo hub --config hub.json
                            serve a hub (discovery, liveness and services for
                            a velo application; a live page at the public
                            listener's /)
  velo hub --demo           serve a hub on free ports, run a client against
                            it (register, a service, a call by name,
                            unregister) and stop
  velo inspect [--watch] URL
                            print the live view of a node that serves
                            velo.DebugHandler at URL (peers, calls, mux,
                            anchors, events)
  velo bench <harness> [flags]
                            run a benchmark harness (runs velo-bench;
                            'velo bench help' lists the harnesses)
  velo soak messenger|stream|rendezvous|all [--transport tcp|quic|grpc]
            [--tier ci|nightly|long] [--faults]
                            the soak driver: nodes in child processes, every
                            message and token checked, RSS and goroutine
                            trends, a fault proxy (runs velo-bench)`

func run(args []string) error {
	if len(args) == 0 {
		fmt.Println(usage)
		return nil
	}
	switch args[0] {
	case "demo":
		return runDemo(args[1:])
	case "tour":
		return runTour(args[1:])
	case "hub":
		return runHub(args[1:])
	case "inspect":
		return runInspect(args[1:])
	case "bench", "soak":
		return forwardToBench(args)
	case "help", "-h", "--help":
		fmt.Println(usage)
		return nil
	}
	return fmt.Errorf("unknown command %q\n%s", args[0], usage)
}

// exitCode is the status of a program that velo ran on the user's behalf;
// velo exits with it, having nothing to add to what that program printed.
type exitCode int

func (c exitCode) Error() string { return fmt.Sprintf("exit status %d", int(c)) }
