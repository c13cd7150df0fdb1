package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"time"

	"github.com/velo-go/velo"
	"github.com/velo-go/velo/discovery/fs"
	"github.com/velo-go/velo/ext"
)

// runDemo runs the two-process demo, or, with the hidden --serve-greeter,
// its greeter. --discovery is the in-process tour on an embedded server,
// which lives in velo-bench.
func runDemo(args []string) error {
	flags := flag.NewFlagSet("demo", flag.ContinueOnError)
	discovery := flags.String("discovery", "", "run the tour with an embedded `etcd|nats` server instead (runs velo-bench)")
	var greeterDir string
	flags.Func("serve-greeter", "", func(s string) error { greeterDir = s; return nil })
	flags.Usage = func() {
		fmt.Fprintln(flags.Output(), "usage: velo demo [--discovery etcd|nats]")
		fmt.Fprintln(flags.Output(), "  --discovery etcd|nats\n    \trun the tour with the nodes finding each other through an embedded server (runs velo-bench)")
	}
	if err := flags.Parse(args); err != nil {
		return err
	}
	switch {
	case greeterDir != "":
		return serveGreeter(greeterDir, os.Stdin, os.Stdout)
	case *discovery != "":
		return forwardToBench(append([]string{"demo", "--discovery", *discovery}, flags.Args()...))
	case flags.NArg() > 0:
		return fmt.Errorf("demo takes no arguments, got %q", flags.Args())
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	_, err := demo(ctx, os.Stdout)
	return err
}

// demoRun is what the demo saw, for its test.
type demoRun struct {
	dir        string         // the discovery folder, removed at the end
	greeterPID int            // the greeter process
	greeter    ext.InstanceID // the instance found under the service name
	answers    []string       // the greeter's answers, in call order
	leftOver   int            // instances of the service once the greeter stopped
}

var demoNames = []string{"Ada", "Grace", "Linus"}

// demo starts the greeter process, finds it by service name through
// files in a temporary folder, calls it, stops it, and checks that it
// withdrew itself. Every step prints one line to w.
func demo(ctx context.Context, w io.Writer) (run demoRun, err error) {
	fmt.Fprintln(w, "velo demo: two processes find each other by service name")
	if run.dir, err = os.MkdirTemp("", "velo-demo-*"); err != nil {
		return run, err
	}
	defer os.RemoveAll(run.dir)
	fmt.Fprintf(w, "  discovery: files in %s (discovery/fs)\n", run.dir)

	child, err := startGreeter(run.dir)
	if err != nil {
		return run, err
	}
	defer child.stop(5 * time.Second) // on an early return; stopping twice is safe
	run.greeterPID = child.cmd.Process.Pid
	fmt.Fprintf(w, "  started the greeter process (pid %d)\n", run.greeterPID)
	readyCtx, cancel := context.WithTimeout(ctx, 10*time.Second)
	line, err := child.ready(readyCtx)
	cancel()
	if err != nil {
		return run, err
	}
	fmt.Fprintln(w, "  "+line)

	node, err := newDemoNode(ctx, run.dir)
	if err != nil {
		return run, err
	}
	defer shutdownWithin(node, 2*time.Second)
	if run.greeter, err = findGreeter(ctx, w, node); err != nil {
		return run, err
	}
	for _, name := range demoNames {
		answer, err := greet(ctx, w, node, name)
		if err != nil {
			return run, err
		}
		run.answers = append(run.answers, answer)
	}

	rest, err := child.stop(5 * time.Second)
	for _, line := range rest {
		fmt.Fprintln(w, "  "+line)
	}
	if err != nil {
		return run, fmt.Errorf("the greeter process: %w", err)
	}
	left, err := fs.NewServices(servicesFile(run.dir)).ListService(ctx, greeterService)
	if err != nil {
		return run, err
	}
	run.leftOver = len(left)
	if run.leftOver != 0 {
		return run, fmt.Errorf("service %q still lists %v after the greeter stopped", greeterService, left)
	}
	if _, err := fs.NewPeers(peersFile(run.dir)).DiscoverInstance(ctx, run.greeter); !errors.Is(err, ext.ErrPeerNotFound) {
		return run, fmt.Errorf("the greeter's peer entry after it stopped: want not found, got %v", err)
	}
	fmt.Fprintf(w, "  the greeter exited with status 0; service %q has no instance left and its peer entry is gone\n", greeterService)
	return run, nil
}

// findGreeter asks the node which instance a call to the greeter service
// would go to (the node lists the service in the service file, and finds
// the instance's address in the peer file when it first calls it).
func findGreeter(ctx context.Context, w io.Writer, node *velo.Node) (ext.InstanceID, error) {
	id, err := node.Pick(ctx, greeterService)
	if err != nil {
		return ext.InstanceID{}, err
	}
	fmt.Fprintf(w, "  this process (pid %d) resolved service %q: instance %s\n", os.Getpid(), greeterService, id)
	return id, nil
}

// greet calls the greeter's hello handler with name and prints the answer.
// The call names the service, not the instance.
func greet(ctx context.Context, w io.Writer, node *velo.Node, name string) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	start := time.Now()
	resp, err := node.Unary(ctx, velo.Service(greeterService), helloHandler, []byte(name))
	if err != nil {
		return "", fmt.Errorf("calling %s on service %q: %w", helloHandler, greeterService, err)
	}
	took := time.Since(start)
	fmt.Fprintf(w, "  %s(%q) -> %q (%v)\n", helloHandler, name, resp, took.Round(time.Microsecond))
	return string(resp), nil
}
