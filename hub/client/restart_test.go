package client_test

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/velo-go/velo/ext"
	"github.com/velo-go/velo/hub"
	"github.com/velo-go/velo/hub/client"
)

// restartOn stops h and serves a new hub, on a fresh memory store, on the
// same two addresses, so the clients' URLs reach it.
func restartOn(t *testing.T, h *hub.Hub) *hub.Hub {
	t.Helper()
	cfg := hubConfig()
	cfg.PublicAddr, cfg.ControlAddr = h.PublicAddr().String(), h.ControlAddr().String()
	stopHub(t, h)
	return startHub(t, cfg)
}

// TestRestartOnMemoryStoreRejoins: a hub on a memory store restarts, so
// the new one knows no registrant and never probes it. The client notices
// the silence of the probes, asks the new hub with a heartbeat, is told
// not_found, drops the registration and registers again from scratch,
// with its service on the registration.
func TestRestartOnMemoryStoreRejoins(t *testing.T) {
	ctx := context.Background()
	a := startHub(t, hubConfig())
	node, hc := join(t, a)
	if _, err := hc.RegisterService(ctx, "rejoin-svc"); err != nil {
		t.Fatal(err)
	}
	if got := hubNames(t, a, hc, node.InstanceID()); !slices.Equal(got, []string{"rejoin-svc"}) {
		t.Fatalf("hub A names %v", got)
	}

	b := restartOn(t, a)
	if _, ok := b.Store().LookupInstance(node.InstanceID()); ok {
		t.Fatal("the new hub's fresh store already knows the node")
	}
	eventually(t, "the client to register with the new hub", func() bool {
		return hc.IsRegistered() && hc.HubID() == b.ID()
	})
	if hc.Recovered() {
		t.Fatal("Recovered() after a registration from scratch: there was nothing to recover")
	}
	if _, ok := b.Store().LookupInstance(node.InstanceID()); !ok {
		t.Fatal("the new hub does not hold the node's registration")
	}
	if got := hubNames(t, b, hc, node.InstanceID()); !slices.Equal(got, []string{"rejoin-svc"}) {
		t.Fatalf("hub B names %v, want the service to ride on the registration", got)
	}
	// B probes the node now: the registration is the one the client holds.
	if pr := probe(t, b, node); !pr.OK {
		t.Fatalf("B's probe of the rejoined node: %+v", pr)
	}
}

// TestRestartWithoutVeloRejoins: a RegisterPeer registration (a hub
// without velo; the client sends the HTTP heartbeat) is told not_found
// by a hub restarted on a fresh memory store, and registers again.
func TestRestartWithoutVeloRejoins(t *testing.T) {
	ctx := context.Background()
	cfg := hubConfig()
	a, err := hub.New(cfg, hub.WithLogger(quiet))
	if err != nil {
		t.Fatal(err)
	}
	if err := a.Serve(ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { stopHub(t, a) })
	hc, err := client.New(client.Config{URL: ctlURL(a), Logger: quiet, RetryInterval: 20 * time.Millisecond,
		HeartbeatInterval: 20 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	defer hc.Close()
	peer := ext.PeerInfo{InstanceID: ext.NewInstanceID(), Address: ext.WorkerAddress{"tcp": []byte("127.0.0.1:1")}}
	if err := hc.RegisterPeer(ctx, peer); err != nil {
		t.Fatal(err)
	}
	cfg.PublicAddr, cfg.ControlAddr = a.PublicAddr().String(), a.ControlAddr().String()
	stopHub(t, a)
	b, err := hub.New(cfg, hub.WithLogger(quiet))
	if err != nil {
		t.Fatal(err)
	}
	if err := b.Serve(ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { stopHub(t, b) })
	eventually(t, "the client to register with the new hub", func() bool {
		return hc.IsRegistered() && hc.HubID() == b.ID()
	})
	if _, ok := b.Store().LookupInstance(peer.InstanceID); !ok {
		t.Fatal("the new hub does not hold the registration")
	}
}
