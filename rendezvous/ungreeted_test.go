package rendezvous_test

import (
	"context"
	"testing"
	"time"
)

// TestGetFromAnOwnerNeverGreeted: a consumer that registered the owner by
// hand and never called one of its user handlers gets its Get answered.
// The owner knows nothing of the consumer until a handshake registers it,
// so without one it cannot route its answer back.
func TestGetFromAnOwnerNeverGreeted(t *testing.T) {
	consumer, owner, _, _ := pair(t)
	h := owner.Rendezvous.RegisterData([]byte("payload"))
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	data, lease, err := consumer.Rendezvous.Get(ctx, h)
	if err != nil {
		t.Fatalf("get from an owner never greeted: %v", err)
	}
	if string(data) != "payload" {
		t.Fatalf("got %q", data)
	}
	if err := consumer.Rendezvous.Release(ctx, h, lease); err != nil {
		t.Fatal(err)
	}
}
