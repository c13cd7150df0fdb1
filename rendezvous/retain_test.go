package rendezvous_test

import (
	"context"
	"runtime"
	"testing"
	"time"

	"github.com/velo-go/velo"
)

// A staged payload is the handler's only until it returns: once the call
// is answered nothing of the node keeps it, so the GC frees it. (A spent
// Context kept it in its slab, with up to fifteen others.)
func TestStagedPayloadFreedAfterTheHandler(t *testing.T) {
	caller, server, _, _ := pair(t)
	freed := make(chan struct{})
	if err := server.Register(velo.UnaryHandler("h", func(c *velo.Context) ([]byte, error) {
		// The fetched payload is a buffer of its own, from its start.
		runtime.AddCleanup(&c.Payload[0], func(ch chan struct{}) { close(ch) }, freed)
		return []byte("ok"), nil
	})); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if resp, err := caller.Unary(ctx, server.InstanceID(), "h", pattern(2<<20)); err != nil || string(resp) != "ok" {
		t.Fatalf("unary: %q %v", resp, err)
	}
	for range 50 {
		runtime.GC()
		select {
		case <-freed:
			return
		case <-time.After(10 * time.Millisecond):
		}
	}
	t.Fatal("the staged payload is still reachable after its handler returned")
}
