package velo_test

import (
	"context"
	"errors"
	"testing"

	"github.com/velo-go/velo"
	"github.com/velo-go/velo/discovery/fs"
)

// TestShutdownWithdrawsService: a node registered in a service is gone
// from it once Shutdown has begun, and callers get ErrNoInstance.
func TestShutdownWithdrawsService(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	worker := serviceNode(ctx, dir)
	if err := worker.RegisterService(ctx, "w"); err != nil {
		t.Fatal(err)
	}
	svcs := fs.NewServices(dir + "/services.json")
	if ids, err := svcs.ListService(ctx, "w"); err != nil || len(ids) != 1 || ids[0] != worker.InstanceID() {
		t.Fatalf("registered: %v, %v", ids, err)
	}
	if err := worker.Shutdown(ctx); err != nil {
		t.Fatal(err)
	}
	if ids, err := svcs.ListService(ctx, "w"); err != nil || len(ids) != 0 {
		t.Fatalf("after shutdown: %v, %v", ids, err)
	}
	caller := serviceNode(ctx, dir)
	defer caller.Shutdown(ctx)
	if _, err := caller.Pick(ctx, "w"); !errors.Is(err, velo.ErrNoInstance) {
		t.Fatalf("pick after the only instance left: %v", err)
	}
}

// TestServiceNeedsDiscovery: without WithServiceDiscovery a service call,
// Pick and RegisterService say what is missing; without WithDiscovery a
// node cannot register (no caller could dial it).
func TestServiceNeedsDiscovery(t *testing.T) {
	ctx := context.Background()
	n := node(t)
	if _, err := n.Unary(ctx, velo.Service("w"), "x", nil); err == nil {
		t.Fatal("service call without service discovery succeeded")
	}
	if _, err := n.Pick(ctx, "w"); err == nil {
		t.Fatal("pick without service discovery succeeded")
	}
	m := node(t, velo.WithServiceDiscovery(fs.NewServices(t.TempDir()+"/s.json")))
	if err := m.RegisterService(ctx, "w"); err == nil {
		t.Fatal("RegisterService without peer discovery succeeded")
	}
}

// TestTypedUnaryByService: the generic calls take a service target too.
func TestTypedUnaryByService(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	worker := serviceNode(ctx, dir)
	defer worker.Shutdown(ctx)
	worker.Register(velo.TypedUnaryHandler("double", func(_ *velo.Context, n int) (int, error) { return 2 * n, nil }))
	if err := worker.RegisterService(ctx, "math"); err != nil {
		t.Fatal(err)
	}
	caller := serviceNode(ctx, dir, velo.WithServicePicker(velo.LeastOutstanding))
	defer caller.Shutdown(ctx)
	if got, err := velo.TypedUnary[int](ctx, caller, velo.Service("math"), "double", 21); err != nil || got != 42 {
		t.Fatalf("typed unary by service: %d, %v", got, err)
	}
	done := make(chan int, 1)
	err := velo.TypedUnaryAsync(ctx, caller, velo.Service("math"), "double", 4, func(v int, err error) { done <- v })
	if err != nil || <-done != 8 {
		t.Fatalf("typed unary async by service: %v", err)
	}
	if err := caller.WaitForHandler(ctx, velo.Service("math"), "double"); err != nil {
		t.Fatal(err)
	}
}

// TestEveryPatternByService: Send, Sync, UnaryAsync and RemoteHandlers
// take a service target.
func TestEveryPatternByService(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	worker := serviceNode(ctx, dir)
	defer worker.Shutdown(ctx)
	fired := make(chan string, 1)
	worker.Register(velo.FireHandler("fire", func(c *velo.Context) { fired <- string(c.Payload) }))
	worker.Register(velo.SyncHandler("sync", func(*velo.Context) error { return nil }))
	worker.Register(velo.UnaryHandler("echo", func(c *velo.Context) ([]byte, error) { return c.Payload, nil }))
	if err := worker.RegisterService(ctx, "all"); err != nil {
		t.Fatal(err)
	}
	caller := serviceNode(ctx, dir)
	defer caller.Shutdown(ctx)
	svc := velo.Service("all")
	if err := caller.Send(ctx, svc, "fire", []byte("x")); err != nil || <-fired != "x" {
		t.Fatalf("send: %v", err)
	}
	if err := caller.Sync(ctx, svc, "sync", nil); err != nil {
		t.Fatalf("sync: %v", err)
	}
	got := make(chan string, 1)
	if err := caller.UnaryAsync(ctx, svc, "echo", []byte("y"), func(b []byte, err error) { got <- string(b) }); err != nil || <-got != "y" {
		t.Fatalf("unary async: %v", err)
	}
	hs, err := caller.RemoteHandlers(ctx, svc)
	if err != nil || len(hs) != 3 {
		t.Fatalf("remote handlers: %v, %v", hs, err)
	}
	if id, err := caller.Pick(ctx, "all"); err != nil || id != worker.InstanceID() {
		t.Fatalf("pick: %s, %v", id, err)
	}
}
