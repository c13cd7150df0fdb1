package velo_test

import (
	"context"
	"errors"
	"testing"

	"github.com/velo-go/velo"
)

// TestServiceCallToItself: a node that is the only instance of a service
// and calls that service by name picks itself, and every pattern runs its
// own handler. Before a node could call itself, each of these failed with
// no route to the node.
func TestServiceCallToItself(t *testing.T) {
	ctx := context.Background()
	n := serviceNode(ctx, t.TempDir())
	defer n.Shutdown(ctx)
	fired := make(chan string, 1)
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	must(n.Register(velo.FireHandler("fire", func(c *velo.Context) { fired <- string(c.Payload) })))
	must(n.Register(velo.SyncHandler("sync", func(*velo.Context) error { return nil })))
	must(n.Register(velo.UnaryHandler("echo", func(c *velo.Context) ([]byte, error) { return c.Payload, nil })))
	must(n.Register(velo.TypedUnaryHandler("double", func(_ *velo.Context, v int) (int, error) { return 2 * v, nil })))
	errNope := velo.NewSentinel(velo.FailedPrecondition, "test.nope", "nope")
	must(n.Register(velo.SyncHandler("fails", func(*velo.Context) error { return errNope })))
	must(n.RegisterService(ctx, "x"))
	svc := velo.Service("x")

	if id, err := n.Pick(ctx, "x"); err != nil || id != n.InstanceID() {
		t.Fatalf("pick: %s, %v", id, err)
	}
	if err := n.Send(ctx, svc, "fire", []byte("f")); err != nil || <-fired != "f" {
		t.Fatalf("send: %v", err)
	}
	if err := n.Sync(ctx, svc, "sync", nil); err != nil {
		t.Fatalf("sync: %v", err)
	}
	if resp, err := n.Unary(ctx, svc, "echo", []byte("u")); err != nil || string(resp) != "u" {
		t.Fatalf("unary: %q, %v", resp, err)
	}
	if got, err := velo.TypedUnary[int](ctx, n, svc, "double", 21); err != nil || got != 42 {
		t.Fatalf("typed unary: %d, %v", got, err)
	}
	got := make(chan string, 1)
	if err := n.UnaryAsync(ctx, svc, "echo", []byte("a"), func(b []byte, err error) { got <- string(b) }); err != nil || <-got != "a" {
		t.Fatalf("unary async: %v", err)
	}
	if err := n.Sync(ctx, svc, "fails", nil); !errors.Is(err, errNope) {
		t.Fatalf("a handler's error: %v, want errNope", err)
	}
	// The handler's error is the instance's answer, not a failure to reach
	// it: the instance is still picked.
	if err := n.Sync(ctx, svc, "sync", nil); err != nil {
		t.Fatalf("sync after a handler error: %v", err)
	}
	if err := n.WaitForHandler(ctx, svc, "echo"); err != nil {
		t.Fatalf("wait for handler: %v", err)
	}
	if hs, err := n.RemoteHandlers(ctx, svc); err != nil || len(hs) != 5 {
		t.Fatalf("remote handlers: %v, %v", hs, err)
	}
}

// TestNodeCallsItselfWhileDraining: the facade's calls to its own instance
// id are refused by its own drain, as a peer's are.
func TestNodeCallsItselfWhileDraining(t *testing.T) {
	n := node(t)
	ctx := context.Background()
	if err := n.Register(velo.UnaryHandler("echo", func(c *velo.Context) ([]byte, error) { return c.Payload, nil })); err != nil {
		t.Fatal(err)
	}
	if resp, err := n.Unary(ctx, n.InstanceID(), "echo", []byte("x")); err != nil || string(resp) != "x" {
		t.Fatalf("unary to itself: %q, %v", resp, err)
	}
	n.BeginDrain()
	if _, err := n.Unary(ctx, n.InstanceID(), "echo", []byte("x")); !errors.Is(err, velo.ErrShuttingDown) {
		t.Fatalf("unary to itself while draining: %v, want ErrShuttingDown", err)
	}
	if err := n.Send(ctx, n.InstanceID(), "echo", nil); !errors.Is(err, velo.ErrShuttingDown) {
		t.Fatalf("send to itself while draining: %v, want ErrShuttingDown", err)
	}
}
