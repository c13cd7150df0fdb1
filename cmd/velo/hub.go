package main

import (
	"cmp"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/velo-go/velo"
	"github.com/velo-go/velo/hub"
	"github.com/velo-go/velo/hub/client"
	"github.com/velo-go/velo/internal/hubconf"
	"github.com/velo-go/velo/transport/tcp"
)

// runHub serves a hub from a JSON config until SIGINT or SIGTERM, or,
// with --demo, serves one on free ports, runs a client against it and
// stops.
func runHub(args []string) error {
	flags := flag.NewFlagSet("hub", flag.ContinueOnError)
	config := flags.String("config", "", "the hub's JSON `file` (hub.Config: public_addr, control_addr, heartbeat_interval_ms, ...)")
	demo := flags.Bool("demo", false, "serve on free ports, run a client against the hub (register, a service, a call by name, unregister) and stop")
	veloAddr := flags.String("velo-listen", "", "the `address` of the hub's velo node (TCP), which probes the registrants (default: the config's velo.listen_addr, else 127.0.0.1:0)")
	flags.Usage = func() {
		fmt.Fprintln(flags.Output(), "usage: velo hub --config hub.json | velo hub --demo")
		flags.PrintDefaults()
	}
	if err := flags.Parse(args); err != nil {
		return err
	}
	if flags.NArg() > 0 {
		return fmt.Errorf("hub takes no arguments, got %q", flags.Args())
	}
	if *demo {
		return hubDemo(context.Background(), os.Stdout)
	}
	if *config == "" {
		flags.Usage()
		return errors.New("hub: --config or --demo is required")
	}
	data, err := os.ReadFile(*config)
	if err != nil {
		return err
	}
	file, err := hubconf.Parse(data)
	if err != nil {
		return err
	}
	if file.Store.Kind != hubconf.KindMemory {
		// velo does not link the etcd client: say where to go rather
		// than serve a store the file did not ask for.
		return fmt.Errorf("%s: this store needs velo-hub: go run ./cmd/velo-hub --config %s (velo hub serves only the \"memory\" store; this one is %q)",
			*config, *config, file.Store.Kind)
	}
	cfg := file.Hub
	if *veloAddr == "" {
		*veloAddr = cmp.Or(file.Velo.ListenAddr, "127.0.0.1:0")
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	h, err := serveHub(ctx, cfg, *veloAddr, file.Velo.AdvertiseAddr, nil)
	if err != nil {
		return err
	}
	fmt.Printf("velo hub %s: public http://%s (page at /), control http://%s\n", h.ID(), h.PublicAddr(), h.ControlAddr())
	<-ctx.Done()
	fmt.Println("velo hub: stopping")
	sctx, cancel := context.WithTimeout(context.Background(), 6*time.Duration(cfg.ShutdownTimeoutMS)*time.Millisecond)
	defer cancel()
	return h.Shutdown(sctx)
}

// serveHub starts a hub with a velo node on TCP at veloAddr, advertised
// as advertise when that is set.
func serveHub(ctx context.Context, cfg hub.Config, veloAddr, advertise string, log *slog.Logger) (*hub.Hub, error) {
	tr, err := tcp.New(tcp.WithListenAddr(veloAddr), tcp.WithAdvertiseAddr(advertise))
	if err != nil {
		return nil, err
	}
	opts := []hub.Option{hub.WithVelo(velo.WithTransport(tr))}
	if log != nil {
		opts = append(opts, hub.WithLogger(log), hub.WithVelo(velo.WithLogger(log)))
	}
	h, err := hub.New(cfg, opts...)
	if err != nil {
		return nil, err
	}
	if err := h.Serve(ctx); err != nil {
		return nil, err
	}
	return h, nil
}

// hubDemo serves a hub on free loopback ports and runs two nodes against
// it: a worker that registers and serves "greeter", and a caller that
// finds it by that name through the hub. Then both unregister and the
// hub stops. It prints each step to out.
func hubDemo(ctx context.Context, out io.Writer) (err error) {
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	cfg := hub.DefaultConfig()
	cfg.PublicAddr, cfg.ControlAddr = "127.0.0.1:0", "127.0.0.1:0"
	cfg.HeartbeatIntervalMS = 500
	h, err := serveHub(ctx, cfg, "127.0.0.1:0", "", quiet)
	if err != nil {
		return err
	}
	defer func() {
		sctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if serr := h.Shutdown(sctx); err == nil {
			err = serr
		}
		fmt.Fprintln(out, "hub stopped")
	}()
	ctl, pub := "http://"+h.ControlAddr().String(), "http://"+h.PublicAddr().String()
	fmt.Fprintf(out, "hub %s serving: public %s (page at /), control %s\n", h.ID(), pub, ctl)

	join := func(name string) (*velo.Node, *client.HubClient, error) {
		tr, err := tcp.New(tcp.WithListenAddr("127.0.0.1:0"))
		if err != nil {
			return nil, nil, err
		}
		node, hc, err := client.JoinWith(ctx, client.Config{URL: ctl, PublicURL: pub, Logger: quiet},
			velo.WithTransport(tr), velo.WithLogger(quiet))
		if err != nil {
			return nil, nil, err
		}
		fmt.Fprintf(out, "%s registered: instance %s, epoch %d\n", name, node.InstanceID(), hc.Epoch())
		return node, hc, nil
	}
	worker, wc, err := join("worker")
	if err != nil {
		return err
	}
	defer wc.Close()
	defer worker.Shutdown(context.Background())
	worker.Register(velo.UnaryHandler("greet", func(c *velo.Context) ([]byte, error) {
		return append([]byte("hello, "), c.Payload...), nil
	}))
	if err := worker.RegisterService(ctx, "greeter"); err != nil {
		return err
	}
	fmt.Fprintln(out, `worker serves "greeter"`)
	caller, cc, err := join("caller")
	if err != nil {
		return err
	}
	defer cc.Close()
	defer caller.Shutdown(context.Background())
	cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	resp, err := caller.Unary(cctx, velo.Service("greeter"), "greet", []byte("hub"))
	if err != nil {
		return fmt.Errorf("call by service name: %w", err)
	}
	fmt.Fprintf(out, "caller -> service \"greeter\" -> %q\n", resp)
	for _, x := range []struct {
		name string
		node *velo.Node
		hc   *client.HubClient
	}{{"caller", caller, cc}, {"worker", worker, wc}} {
		if err := x.node.Shutdown(ctx); err != nil {
			return err
		}
		if err := x.hc.Unregister(ctx); err != nil {
			return err
		}
		fmt.Fprintf(out, "%s unregistered\n", x.name)
	}
	return nil
}
