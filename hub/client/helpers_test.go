package client_test

import (
	"context"
	"io"
	"log/slog"
	"testing"
	"time"

	"github.com/velo-go/velo"
	"github.com/velo-go/velo/hub"
	"github.com/velo-go/velo/hub/client"
	"github.com/velo-go/velo/transport/tcp"
)

var quiet = slog.New(slog.NewTextHandler(io.Discard, nil))

// hubConfig serves on free loopback ports; the heartbeat is short so the
// fault tests see evictions quickly.
func hubConfig() hub.Config {
	c := hub.DefaultConfig()
	c.PublicAddr, c.ControlAddr = "127.0.0.1:0", "127.0.0.1:0"
	c.HeartbeatIntervalMS = 50
	c.HeartbeatMaxFailures = 3
	c.LockTimeoutMS, c.StepTimeoutMS, c.ShutdownTimeoutMS = 2000, 2000, 2000
	return c
}

func tcpOpt(t testing.TB) velo.Option {
	t.Helper()
	tr, err := tcp.New(tcp.WithListenAddr("127.0.0.1:0"))
	if err != nil {
		t.Fatal(err)
	}
	return velo.WithTransport(tr)
}

// startHub serves a hub with velo (unless opts say otherwise) and stops
// it at cleanup.
func startHub(t *testing.T, cfg hub.Config, opts ...hub.Option) *hub.Hub {
	t.Helper()
	opts = append([]hub.Option{hub.WithLogger(quiet), hub.WithVelo(tcpOpt(t), velo.WithLogger(quiet))}, opts...)
	h, err := hub.New(cfg, opts...)
	if err != nil {
		t.Fatal(err)
	}
	if err := h.Serve(context.Background()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { stopHub(t, h) })
	return h
}

func stopHub(t testing.TB, h *hub.Hub) {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if err := h.Shutdown(ctx); err != nil {
		t.Errorf("hub shutdown: %v", err)
	}
}

func ctlURL(h *hub.Hub) string { return "http://" + h.ControlAddr().String() }
func pubURL(h *hub.Hub) string { return "http://" + h.PublicAddr().String() }

// join builds a node on the hub and stops it (node, then client) at
// cleanup.
func join(t *testing.T, h *hub.Hub) (*velo.Node, *client.HubClient) {
	t.Helper()
	node, hc, err := client.JoinWith(context.Background(),
		client.Config{URL: ctlURL(h), PublicURL: pubURL(h), Logger: quiet, RetryInterval: 50 * time.Millisecond},
		tcpOpt(t), velo.WithLogger(quiet))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		node.Shutdown(ctx)
		hc.Close()
	})
	return node, hc
}

// eventually polls cond every 10 ms for up to 20 s: for state another
// process or goroutine changes (the hub's probes), where no signal exists.
func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}
