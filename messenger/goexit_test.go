package messenger_test

import (
	"context"
	"errors"
	"runtime"
	"testing"
	"time"

	"github.com/velo-go/velo"
)

// TestInlineGoexitOverTCP: a unary handler that runs on its reader (a
// lone call finds its pool idle) and calls runtime.Goexit ends the
// reader's goroutine. Its caller is answered with an error at once rather
// than at its deadline, the connection is read on, so a second call on it
// is answered, and the node's shutdown does not wait for the request.
func TestInlineGoexitOverTCP(t *testing.T) {
	a, b := pair(t, nil, nil)
	ctx := testCtx(t)
	must(t, b.Register(velo.UnaryHandler("exits", func(*velo.Context) ([]byte, error) {
		runtime.Goexit()
		return nil, nil
	})))
	must(t, b.Register(velo.UnaryHandler("echo", func(c *velo.Context) ([]byte, error) { return c.Payload, nil })))
	must(t, a.WaitForHandler(ctx, b.InstanceID(), "exits"))
	must(t, a.WaitForHandler(ctx, b.InstanceID(), "echo"))

	// Well under failAfter: without an answer the call would end here.
	callCtx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	_, err := a.Unary(callCtx, b.InstanceID(), "exits", nil)
	if err == nil || errors.Is(err, context.DeadlineExceeded) || errors.Is(err, velo.ErrRequestTimeout) {
		t.Fatalf("the call whose handler called Goexit: %v, want the handler's error at once", err)
	}
	if inline, _ := b.Messenger().SpawnCounts("exits"); inline != 1 {
		t.Fatalf("%d runs of the handler on its reader, want 1 (the test is of that path)", inline)
	}
	resp, err := a.Unary(callCtx, b.InstanceID(), "echo", []byte("on"))
	if err != nil || string(resp) != "on" {
		t.Fatalf("a call on the same connection after: %q, %v", resp, err)
	}
	sctx, scancel := context.WithTimeout(ctx, 5*time.Second)
	defer scancel()
	if err := b.Shutdown(sctx); err != nil {
		t.Fatalf("shutdown: %v", err)
	}
}
