// Command hub-worker is a velo node that joins a hub and serves a
// service: the worker half of the hub walk-through in docs/hub.md.
//
//	go run ./cmd/velo-hub --config hub.json --embedded-etcd ./hub-data
//	go run ./examples/hub-worker --hub http://127.0.0.1:8337
//	go run ./examples/hub-caller --hub http://127.0.0.1:8337
//
// It prints "ready <instance id>" once it is registered and serves the
// service, and stops on SIGINT or SIGTERM: node.Shutdown withdraws the
// service, then hc.Close unregisters.
package main

import (
	"context"
	"flag"
	"fmt"
	"log"
	"log/slog"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/velo-go/velo"
	"github.com/velo-go/velo/hub/client"
	"github.com/velo-go/velo/transport/tcp"
)

func main() {
	hubURL := flag.String("hub", "http://127.0.0.1:8337", "the hub's control listener")
	service := flag.String("service", "greeter", "the service name to serve")
	// The hub probes this node, and callers call it, on this address: on
	// more than one host, listen on an address they can reach (":0", or
	// this host's IP).
	listen := flag.String("listen", "127.0.0.1:0", "the node's velo TCP `address`")
	flag.Parse()
	if err := run(*hubURL, *service, *listen); err != nil {
		log.Fatal(err)
	}
}

func run(hubURL, service, listen string) error {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	tr, err := tcp.New(tcp.WithListenAddr(listen))
	if err != nil {
		return err
	}
	warnings := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	node, hc, err := client.JoinWith(ctx, client.Config{URL: hubURL, Logger: warnings},
		velo.WithTransport(tr), velo.WithLogger(warnings))
	if err != nil {
		return err
	}
	defer hc.Close() // unregisters: after node.Shutdown
	err = node.Register(velo.UnaryHandler("greet", func(c *velo.Context) ([]byte, error) {
		return fmt.Appendf(nil, "hello %s, from %s", c.Payload, node.InstanceID()), nil
	}))
	if err != nil {
		return err
	}
	if err := node.RegisterService(ctx, service); err != nil {
		return err
	}
	fmt.Println("ready", node.InstanceID())
	<-ctx.Done()
	sctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	return node.Shutdown(sctx) // drains, and withdraws the service
}
