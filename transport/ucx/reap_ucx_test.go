//go:build ucx

package ucx

import (
	"context"
	"testing"
	"time"

	"github.com/velo-go/velo/ext"
)

// After our reaper closed our endpoint to a peer, the peer's next frames
// to us still arrive over real UCX (tcp): this transport sends no frame
// with UCX's reply flag, which is what lost them in the reference.
func TestReapedEndpointPeerStillReachesUs(t *testing.T) {
	a := startNode(t, newReal(t, WithEndpointIdleTimeout(MinIdleTimeout)))
	b := startNode(t, newReal(t))
	a.register(t, b)
	b.register(t, a)
	sendOne(t, a, b)
	sendOne(t, b, a)
	deadline := time.Now().Add(20 * time.Second)
	for a.tr.Stats().Reaped == 0 {
		if time.Now().After(deadline) {
			t.Fatal("never reaped")
		}
		time.Sleep(50 * time.Millisecond)
	}
	for i := range 8 {
		if _, err := b.tr.Send(a.id, ext.Frame{Type: ext.Message, Header: []byte("after reap"), Payload: []byte{byte(i)}}); err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		m, err := a.adapter.Messages().Pop(ctx)
		cancel()
		if err != nil {
			t.Fatalf("message %d after the reap was lost: %v", i, err)
		}
		m.Done()
	}
	sendOne(t, a, b) // and ours goes out on a new endpoint
}
