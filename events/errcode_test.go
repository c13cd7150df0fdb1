package events_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/velo-go/velo"
	"github.com/velo-go/velo/events"
)

// TestRemoteRefusalsKeepTheirSentinels: the owner's refusals of a trigger
// request reach the requester on another node as the same sentinels, with
// codes, in a text that names the operation and no internal handler.
func TestRemoteRefusalsKeepTheirSentinels(t *testing.T) {
	ctx := testCtx(t)
	a, b := pair(t, false)
	e := newEvent(t, a.Events)
	if err := b.Events.Trigger(ctx, e.Handle()); err != nil {
		t.Fatalf("first trigger: %v", err)
	}
	err := b.Events.Trigger(ctx, e.Handle())
	if !errors.Is(err, events.ErrAlreadyCompleted) || velo.ErrorCode(err) != velo.FailedPrecondition {
		t.Fatalf("second trigger: %v (code %v), want ErrAlreadyCompleted, FailedPrecondition", err, velo.ErrorCode(err))
	}
	if !strings.HasPrefix(err.Error(), "event trigger: ") || strings.Contains(err.Error(), "_event") {
		t.Fatalf("second trigger: %q names no operation, or an internal handler", err)
	}
	// A handle of A's that names no event: ErrUnknownEvent, NotFound.
	bogus := e.Handle()
	bogus.Lo ^= 1 << 40
	err = b.Events.Poison(ctx, bogus, "gone")
	if !errors.Is(err, events.ErrUnknownEvent) || errors.Is(err, events.ErrAlreadyCompleted) || velo.ErrorCode(err) != velo.NotFound {
		t.Fatalf("poison of an unknown handle: %v (code %v), want ErrUnknownEvent, NotFound", err, velo.ErrorCode(err))
	}
	if !strings.HasPrefix(err.Error(), "event poison: ") {
		t.Fatalf("poison: %q names no operation", err)
	}
}
