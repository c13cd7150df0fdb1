package client_test

import (
	"context"
	"errors"
	"testing"

	"github.com/velo-go/velo"
	"github.com/velo-go/velo/ext"
	"github.com/velo-go/velo/hub/protocol"
)

// TestJoinFindsPeersAndServices: two nodes that only know the hub's URL
// register, find each other through it, and call by service name; the
// worker's Shutdown withdraws its service and the caller gets
// ErrNoInstance; the last Close unregisters.
func TestJoinFindsPeersAndServices(t *testing.T) {
	ctx := context.Background()
	h := startHub(t, hubConfig())
	worker, wc := join(t, h)
	caller, cc := join(t, h)
	if !wc.IsRegistered() || !cc.IsRegistered() {
		t.Fatal("Join returned without a registration")
	}
	worker.Register(velo.UnaryHandler("echo", func(c *velo.Context) ([]byte, error) {
		return append([]byte("echo:"), c.Payload...), nil
	}))
	if err := worker.RegisterService(ctx, "echo-svc"); err != nil {
		t.Fatal(err)
	}
	// The caller never registered the worker's peer: the hub found it.
	resp, err := caller.Unary(ctx, velo.Service("echo-svc"), "echo", []byte("hi"))
	if err != nil || string(resp) != "echo:hi" {
		t.Fatalf("call by service name: %q, %v", resp, err)
	}
	if resp, err := caller.Unary(ctx, worker.InstanceID(), "echo", []byte("id")); err != nil || string(resp) != "echo:id" {
		t.Fatalf("call by instance id: %q, %v", resp, err)
	}
	if p, err := cc.Discovery().DiscoverWorker(ctx, worker.WorkerID()); err != nil || p.InstanceID != worker.InstanceID() {
		t.Fatalf("discover worker: %v, %v", p.InstanceID, err)
	}
	if _, err := cc.Discovery().DiscoverInstance(ctx, ext.NewInstanceID()); !errors.Is(err, ext.ErrPeerNotFound) || !errors.Is(err, protocol.CodeNotFound) {
		t.Fatalf("unknown peer: %v", err)
	}
	names, err := cc.Services().ListServices(ctx)
	if err != nil || len(names) != 1 || names[0] != "echo-svc" {
		t.Fatalf("services %v, %v", names, err)
	}
	if err := worker.Shutdown(ctx); err != nil {
		t.Fatal(err)
	}
	if ids, err := cc.Services().ListService(ctx, "echo-svc"); err != nil || len(ids) != 0 {
		t.Fatalf("after the worker's shutdown: %v, %v", ids, err)
	}
	if err := wc.Close(); err != nil {
		t.Fatal(err)
	}
	if _, ok := h.Store().LookupInstance(worker.InstanceID()); ok {
		t.Fatal("the last Close left the registration in the hub")
	}
	eventually(t, "the caller to see no instance", func() bool {
		_, err := caller.Pick(ctx, "echo-svc")
		return errors.Is(err, velo.ErrNoInstance)
	})
}
