package client_test

import (
	"context"
	"errors"
	"net"
	"testing"
	"time"

	"github.com/velo-go/velo"
	"github.com/velo-go/velo/hub/client"
)

// downURL is a loopback URL nothing listens on.
func downURL(t *testing.T) string {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	u := "http://" + ln.Addr().String()
	ln.Close()
	return u
}

// TestHubDownIsMatchable: with the hub down, Join, a service lookup and a
// call by service name fail with ErrHubUnreachable (the request never
// left), not a NoAnswerError and not a hang.
func TestHubDownIsMatchable(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	url := downURL(t)
	if _, _, err := client.JoinWith(ctx, client.Config{URL: url, Logger: quiet}, tcpOpt(t), velo.WithLogger(quiet)); !errors.Is(err, client.ErrHubUnreachable) {
		t.Fatalf("Join with the hub down: %v", err)
	}
	hc, err := client.New(client.Config{URL: url, Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	defer hc.Close()
	_, err = hc.Services().ListService(ctx, "greeter")
	var na *client.NoAnswerError
	if !errors.Is(err, client.ErrHubUnreachable) || errors.As(err, &na) {
		t.Fatalf("ListService with the hub down: %v", err)
	}
	node, err := velo.New(ctx, append([]velo.Option{tcpOpt(t), velo.WithLogger(quiet)}, hc.NodeOptions()...)...)
	if err != nil {
		t.Fatal(err)
	}
	defer node.Shutdown(context.Background())
	if _, err := node.Unary(ctx, velo.Service("greeter"), "greet", nil); !errors.Is(err, client.ErrHubUnreachable) {
		t.Fatalf("call by service name with the hub down: %v", err)
	}
	// A request cut short by its own context is the caller's doing, not
	// the hub's absence.
	cctx, ccancel := context.WithCancel(ctx)
	ccancel()
	if _, err := hc.Services().ListService(cctx, "greeter"); errors.Is(err, client.ErrHubUnreachable) || !errors.Is(err, context.Canceled) {
		t.Fatalf("ListService with a cancelled context: %v", err)
	}
}
