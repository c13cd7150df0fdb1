// Command hub-caller calls a service by name through a hub, over and
// over, and says what each call got: the caller half of the hub
// walk-through in docs/hub.md (start velo-hub and examples/hub-worker
// first).
//
// Each line is "ok <answer>" or "error <kind>: <error>", the kind found
// with errors.Is: no-instance (velo.ErrNoInstance: no live member),
// unreachable (velo.ErrPeerUnreachable: the member picked went away),
// hub-unreachable (client.ErrHubUnreachable: the hub is down and the
// caller never learned the members; once it has, it keeps them), timeout
// (the call's deadline), other.
package main

import (
	"context"
	"errors"
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
	service := flag.String("service", "greeter", "the service name to call")
	every := flag.Duration("every", 500*time.Millisecond, "pause between calls")
	timeout := flag.Duration("timeout", 2*time.Second, "deadline of each call")
	count := flag.Int("n", 0, "calls to make (0: until SIGINT or SIGTERM)")
	flag.Parse()
	if err := run(*hubURL, *service, *every, *timeout, *count); err != nil {
		log.Fatal(err)
	}
}

func run(hubURL, service string, every, timeout time.Duration, count int) error {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	tr, err := tcp.New()
	if err != nil {
		return err
	}
	warnings := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	node, hc, err := client.JoinWith(ctx, client.Config{URL: hubURL, Logger: warnings},
		velo.WithTransport(tr), velo.WithLogger(warnings))
	if err != nil {
		return err
	}
	defer hc.Close()
	defer node.Shutdown(context.Background())
	for i := 0; count == 0 || i < count; i++ {
		cctx, cancel := context.WithTimeout(ctx, timeout)
		resp, err := node.Unary(cctx, velo.Service(service), "greet", []byte("caller"))
		cancel()
		if ctx.Err() != nil {
			return nil // stopped by a signal
		}
		if err != nil {
			fmt.Printf("error %s: %v\n", kind(err), err)
		} else {
			fmt.Printf("ok %s\n", resp)
		}
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(every):
		}
	}
	return nil
}

// kind names what went wrong, as a program acting on it would test it.
func kind(err error) string {
	switch {
	case errors.Is(err, velo.ErrNoInstance):
		return "no-instance"
	case errors.Is(err, velo.ErrPeerUnreachable):
		return "unreachable"
	case errors.Is(err, client.ErrHubUnreachable):
		return "hub-unreachable"
	case errors.Is(err, context.DeadlineExceeded):
		return "timeout"
	}
	return "other"
}
