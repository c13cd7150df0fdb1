package client_test

import (
	"context"
	"errors"
	"net"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/velo-go/velo"
	"github.com/velo-go/velo/ext"
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

// TestHubDownIsDiscoveryUnavailable: the reads velo's service resolver
// makes mark a hub that said nothing about the service with
// ext.ErrDiscoveryUnavailable, which tells the resolver to keep what it
// knows: a hub that is down (list and watch), and a proxy's page instead
// of the hub's answer. A refusal of the client's own is not marked.
func TestHubDownIsDiscoveryUnavailable(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if !errors.Is(client.ErrHubUnreachable, ext.ErrDiscoveryUnavailable) {
		t.Fatal("ErrHubUnreachable does not match ext.ErrDiscoveryUnavailable")
	}
	hc, err := client.New(client.Config{URL: downURL(t), Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	defer hc.Close()
	if _, err := hc.Services().ListService(ctx, "greeter"); !errors.Is(err, ext.ErrDiscoveryUnavailable) {
		t.Fatalf("list, hub down: %v", err)
	}
	if _, err := hc.Services().WatchService(ctx, "greeter"); !errors.Is(err, ext.ErrDiscoveryUnavailable) {
		t.Fatalf("watch, hub down: %v", err)
	}

	h := startHub(t, hubConfig())
	p := newLossyProxy(t, pubURL(h))
	viaProxy, err := client.New(client.Config{URL: ctlURL(h), PublicURL: p.URL(), Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	defer viaProxy.Close()
	p.setRule(func(*http.Request) string { return "502" })
	if _, err := viaProxy.Services().ListService(ctx, "greeter"); !errors.Is(err, ext.ErrDiscoveryUnavailable) {
		t.Fatalf("list, a proxy's 502: %v", err)
	}
	// The lossy proxy reads whole answers, so a watch meets a gateway
	// that only ever answers 502.
	gw := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "text/html")
		w.WriteHeader(http.StatusBadGateway)
	}))
	defer gw.Close()
	viaGW, err := client.New(client.Config{URL: gw.URL, Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	defer viaGW.Close()
	if _, err := viaGW.Services().WatchService(ctx, "greeter"); !errors.Is(err, ext.ErrDiscoveryUnavailable) {
		t.Fatalf("watch, a gateway's 502: %v", err)
	}
	p.setRule(nil)
	if _, err := viaProxy.Services().ListService(ctx, "bad..name/"); err == nil || errors.Is(err, ext.ErrDiscoveryUnavailable) {
		t.Fatalf("a name the client refuses: %v", err)
	}
}
