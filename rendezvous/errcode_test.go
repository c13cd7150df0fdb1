package rendezvous_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/velo-go/velo"
	"github.com/velo-go/velo/internal/msgrx"
	"github.com/velo-go/velo/rendezvous"
)

// TestGetAfterReleaseMatchesErrNotFound: across two nodes, a Get of a
// handle whose last reference was released fails with an error that
// matches ErrNotFound, has code NotFound and names the operation
// ("rendezvous get: ..."), not the internal _rv_acquire handler. Metadata
// and Ref name theirs alike.
func TestGetAfterReleaseMatchesErrNotFound(t *testing.T) {
	consumer, owner, _, _ := pair(t)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := msgrx.Handshake(consumer.Messenger(), ctx, owner.InstanceID()); err != nil {
		t.Fatal(err)
	}
	h := owner.Rendezvous.RegisterData([]byte("payload"))
	_, lease, err := consumer.Rendezvous.Get(ctx, h)
	if err != nil {
		t.Fatal(err)
	}
	if err := consumer.Rendezvous.Release(ctx, h, lease); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the release", func() bool { _, n := owner.Rendezvous.HeldBytes(); return n == 0 })

	_, _, err = consumer.Rendezvous.Get(ctx, h)
	if !errors.Is(err, rendezvous.ErrNotFound) || velo.ErrorCode(err) != velo.NotFound {
		t.Fatalf("get after release: %v (code %v), want ErrNotFound, NotFound", err, velo.ErrorCode(err))
	}
	if !strings.HasPrefix(err.Error(), "rendezvous get: handle not found") || strings.Contains(err.Error(), "_rv") {
		t.Fatalf("get after release: %q, want it to name the operation and no handler", err)
	}
	_, err = consumer.Rendezvous.Metadata(ctx, h)
	if !errors.Is(err, rendezvous.ErrNotFound) || !strings.HasPrefix(err.Error(), "rendezvous metadata: ") {
		t.Fatalf("metadata after release: %v", err)
	}
	err = consumer.Rendezvous.Ref(ctx, h)
	if !errors.Is(err, rendezvous.ErrNotFound) || !strings.HasPrefix(err.Error(), "rendezvous ref: ") {
		t.Fatalf("ref after release: %v", err)
	}
}
