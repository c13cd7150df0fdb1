package events_test

import (
	"context"
	"errors"
	"testing"

	"github.com/velo-go/velo"
	"github.com/velo-go/velo/discovery/discoverytest"
)

// TestRemoteWaitThroughDiscovery: B waits on an event A owns, though
// neither registered the other: B resolves the handle's owner worker
// through discovery. When A's registration then vanishes (a lease that
// expired), B's second wait fails with ErrPeerUnreachable.
func TestRemoteWaitThroughDiscovery(t *testing.T) {
	d := discoverytest.NewMemory()
	a, b := discoverytest.StartNode(t, d), discoverytest.StartNode(t, d)
	ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
	defer cancel()
	first, err := a.Events.NewEvent()
	if err != nil {
		t.Fatal(err)
	}
	ch := waitAsync(ctx, b.Events, first.Handle())
	eventually(t, "B subscribed", func() bool { return a.Events.SubscribersRecorded() > 0 })
	if err := first.Trigger(); err != nil {
		t.Fatal(err)
	}
	if err := recv(t, ch, "the first wait"); err != nil {
		t.Fatalf("wait through discovery: %v", err)
	}
	second, err := a.Events.NewEvent()
	if err != nil {
		t.Fatal(err)
	}
	ch = waitAsync(ctx, b.Events, second.Handle())
	eventually(t, "B subscribed again", func() bool { return a.Events.SubscribersRecorded() > 1 })
	d.Expire(a.InstanceID())
	if err := recv(t, ch, "the second wait"); !errors.Is(err, velo.ErrPeerUnreachable) {
		t.Fatalf("wait after the owner's registration vanished: %v, want ErrPeerUnreachable", err)
	}
}
