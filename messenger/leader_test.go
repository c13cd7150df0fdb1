package messenger_test

import (
	"testing"

	"github.com/velo-go/velo"
	"github.com/velo-go/velo/internal/testwait"
)

// TestSpawnRunsOnReader: one unary call at a time to a spawn handler runs
// the handler on the goroutine that read the request: no pool worker is
// woken for it (nor, for a short handler, a follower: streamsock's
// TestInlineRunKeepsItsConnection). Before
// the reader could hand off, each call woke a worker (a hand-off in front
// of the handler).
func TestSpawnRunsOnReader(t *testing.T) {
	a, b := pair(t, nil, nil)
	ctx := testCtx(t)
	must(t, b.Register(velo.UnaryHandler("echo", func(c *velo.Context) ([]byte, error) {
		return c.Payload, nil
	})))
	const calls = 200
	for range calls {
		// The reply goes out before the run that sent it has ended, so
		// the next request can find the run still holding the pool (it
		// then takes a worker, as a request behind a running one must):
		// each call here waits for the pool to be idle, which is what a
		// lone request meets.
		testwait.Until(t, "the pool to be idle", func() bool { return b.Messenger().SpawnIdle("echo") })
		if _, err := a.Unary(ctx, b.InstanceID(), "echo", []byte("x")); err != nil {
			t.Fatal(err)
		}
	}
	inline, wakes := b.Messenger().SpawnCounts("echo")
	t.Logf("%d calls: %d ran on the reader, %d workers woken or started", calls, inline, wakes)
	if inline != calls || wakes != 0 {
		t.Fatalf("%d calls: %d ran on the reader and %d workers were woken; want nearly all on the reader", calls, inline, wakes)
	}
}

// TestSpawnOnReaderBlockingHandler: a handler that runs on the reader and
// blocks does not stall its connection. While it blocks, the same caller's
// next request, on the same connection, is read and answered, and so is a
// call the blocked handler makes back to its caller (whose answer comes
// back on a connection the blocked node reads).
func TestSpawnOnReaderBlockingHandler(t *testing.T) {
	a, b := pair(t, nil, nil)
	ctx := testCtx(t)
	release := make(chan struct{})
	entered := make(chan struct{})
	must(t, a.Register(velo.UnaryHandler("back", func(c *velo.Context) ([]byte, error) {
		return []byte("from a"), nil
	})))
	must(t, b.Register(velo.UnaryHandler("block", func(c *velo.Context) ([]byte, error) {
		// A call back to the caller: its answer is read by the follower.
		resp, err := b.Unary(c.Context(), a.InstanceID(), "back", nil)
		if err != nil {
			return nil, err
		}
		close(entered)
		<-release
		return resp, nil
	})))
	must(t, b.Register(velo.UnaryHandler("echo", func(c *velo.Context) ([]byte, error) {
		return c.Payload, nil
	})))
	// Greet first, so that the blocking call is a read of its own.
	if _, err := a.Unary(ctx, b.InstanceID(), "echo", []byte("hi")); err != nil {
		t.Fatal(err)
	}
	blocked := make(chan error, 1)
	go func() {
		resp, err := a.Unary(ctx, b.InstanceID(), "block", nil)
		if err == nil && string(resp) != "from a" {
			t.Errorf("block answered %q", resp)
		}
		blocked <- err
	}()
	select {
	case <-entered:
	case err := <-blocked:
		t.Fatalf("block returned early: %v", err)
	}
	for range 20 {
		if resp, err := a.Unary(ctx, b.InstanceID(), "echo", []byte("y")); err != nil || string(resp) != "y" {
			t.Fatalf("echo while a handler blocks: %q, %v", resp, err)
		}
	}
	close(release)
	if err := <-blocked; err != nil {
		t.Fatal(err)
	}
	if inline, _ := b.Messenger().SpawnCounts("block"); inline != 1 {
		t.Fatalf("block ran on a reader %d times, want 1 (the test means that case)", inline)
	}
}
