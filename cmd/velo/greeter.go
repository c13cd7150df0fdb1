package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/signal"
	"path/filepath"
	"syscall"
	"time"

	"github.com/velo-go/velo"
	"github.com/velo-go/velo/discovery/fs"
	"github.com/velo-go/velo/transport/tcp"
)

// The greeter is the demo's second process: this binary again, started
// with the hidden --serve-greeter flag. It publishes itself under a
// service name in the demo's discovery folder and answers "hello" until
// its parent closes its stdin.

const (
	greeterService = "greeter"
	helloHandler   = "hello"
)

// The discovery folder holds the two files of discovery/fs.
func peersFile(dir string) string    { return filepath.Join(dir, "peers.json") }
func servicesFile(dir string) string { return filepath.Join(dir, "services.json") }

// newDemoNode is a node on loopback TCP that publishes itself, and finds
// its peers and services, in the discovery folder dir.
func newDemoNode(ctx context.Context, dir string) (*velo.Node, error) {
	tr, err := tcp.New()
	if err != nil {
		return nil, err
	}
	return velo.New(ctx, velo.WithTransport(tr),
		velo.WithDiscovery(fs.NewPeers(peersFile(dir))),
		velo.WithServiceDiscovery(fs.NewServices(servicesFile(dir))))
}

// serveGreeter runs the greeter. Its first line on out tells the parent
// that the service is registered; it stops when in ends (the parent closed
// it, or died) or on SIGINT or SIGTERM, withdrawing its entries first.
func serveGreeter(dir string, in io.Reader, out io.Writer) error {
	ctx := context.Background()
	node, err := newDemoNode(ctx, dir)
	if err != nil {
		return err
	}
	defer shutdownWithin(node, 2*time.Second)
	pid := os.Getpid()
	err = node.Register(velo.UnaryHandler(helloHandler, func(c *velo.Context) ([]byte, error) {
		return fmt.Appendf(nil, "hello, %s, from the greeter (pid %d)", c.Payload, pid), nil
	}))
	if err != nil {
		return err
	}
	if err := node.RegisterService(ctx, greeterService); err != nil {
		return err
	}
	fmt.Fprintf(out, "greeter (pid %d): node %s serves %q and registered as service %q\n",
		pid, node.InstanceID(), helloHandler, greeterService)
	waitForStop(in)
	// Shutdown withdraws the service entry first, then the peer entry.
	if err := shutdownWithin(node, 2*time.Second); err != nil {
		return err
	}
	fmt.Fprintf(out, "greeter (pid %d): withdrew its service and peer entries and shut down\n", pid)
	return nil
}

// waitForStop returns when in ends or SIGINT or SIGTERM arrives.
func waitForStop(in io.Reader) {
	sigs := make(chan os.Signal, 1)
	signal.Notify(sigs, os.Interrupt, syscall.SIGTERM)
	defer signal.Stop(sigs)
	eof := make(chan struct{})
	go func() {
		io.Copy(io.Discard, in)
		close(eof)
	}()
	select {
	case <-eof:
	case <-sigs:
	}
}

// shutdownWithin shuts n down, draining for at most d.
func shutdownWithin(n *velo.Node, d time.Duration) error {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	return n.Shutdown(ctx)
}
