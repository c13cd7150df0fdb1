package client_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/velo-go/velo"
	"github.com/velo-go/velo/hub/client"
)

func serveEcho(t *testing.T, n *velo.Node, service string) {
	t.Helper()
	if err := n.Register(velo.UnaryHandler("who", func(c *velo.Context) ([]byte, error) {
		return []byte(n.InstanceID().String()), nil
	})); err != nil {
		t.Fatal(err)
	}
	if err := n.RegisterService(context.Background(), service); err != nil {
		t.Fatal(err)
	}
}

// TestCallsByNameOutliveTheHub: the hub stops; the caller's watch of the
// service breaks and the hub cannot be asked, yet its calls by service
// name go on to the live worker, on the members it last learned. A hub
// started again (on a fresh memory store, at the same addresses) is
// watched again: a worker that joins it after the restart is picked.
func TestCallsByNameOutliveTheHub(t *testing.T) {
	ctx := context.Background()
	a := startHub(t, hubConfig())
	worker, _ := join(t, a)
	serveEcho(t, worker, "who")
	caller, cc := join(t, a)
	call := func() (string, error) {
		cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		defer cancel()
		b, err := caller.Unary(cctx, velo.Service("who"), "who", nil)
		return string(b), err
	}
	if got, err := call(); err != nil || got != worker.InstanceID().String() {
		t.Fatalf("call with the hub up: %q, %v", got, err)
	}

	cfg := hubConfig()
	cfg.PublicAddr, cfg.ControlAddr = a.PublicAddr().String(), a.ControlAddr().String()
	stopHub(t, a)
	if _, err := cc.Services().ListService(ctx, "who"); !errors.Is(err, client.ErrHubUnreachable) {
		t.Fatalf("the hub is not down: %v", err)
	}
	// The stop ended the watch stream before the hub drained; calls over
	// several heartbeat intervals (the watch broke, the resolver has
	// asked the hub again and found it gone) all reach the worker.
	down := time.Now()
	for i := 0; i < 20 || time.Since(down) < 4*time.Duration(cfg.HeartbeatIntervalMS)*time.Millisecond; i++ {
		if got, err := call(); err != nil || got != worker.InstanceID().String() {
			t.Fatalf("call %d with the hub down: %q, %v", i, got, err)
		}
		time.Sleep(5 * time.Millisecond)
	}

	b := startHub(t, cfg)
	late, _ := join(t, b)
	serveEcho(t, late, "who")
	eventually(t, "the caller to reach the worker that joined after the restart", func() bool {
		got, err := call()
		return err == nil && got == late.InstanceID().String()
	})
}
