package messenger_test

import (
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/velo-go/velo"
	"github.com/velo-go/velo/messenger"
)

// errQuota is a user sentinel with a code of the application's own.
var errQuota = velo.NewSentinel(velo.UserCodeMin+1, "test_quota", "test: quota used up")

// TestErrorCodesCrossTheWire: across two nodes over TCP, the code and the
// message of a handler's *Error reach the caller of every pattern that
// answers (Unary, Sync, TypedUnary, UnaryAsync); a user sentinel with a
// code of its own keeps its identity; a plain error reads as Unknown.
func TestErrorCodesCrossTheWire(t *testing.T) {
	caller, server := pair(t, nil, nil)
	ctx := testCtx(t)
	must(t, server.Register(velo.UnaryHandler("find", func(c *velo.Context) ([]byte, error) {
		return nil, velo.Errorf(velo.NotFound, "no user %s", c.Payload)
	})))
	must(t, server.Register(velo.SyncHandler("check", func(c *velo.Context) error {
		return fmt.Errorf("check %s: %w", c.Payload, velo.NewError(velo.InvalidArgument, "empty name"))
	})))
	must(t, server.Register(velo.TypedUnaryHandler("spend", func(_ *velo.Context, n int) (int, error) {
		return 0, fmt.Errorf("spend %d: %w", n, errQuota)
	})))
	must(t, server.Register(velo.UnaryHandler("plain", func(*velo.Context) ([]byte, error) {
		return nil, errors.New("just text")
	})))

	_, err := caller.Unary(ctx, server.InstanceID(), "find", []byte("7"))
	wantCode(t, "Unary", err, velo.NotFound, "no user 7")

	err = caller.Sync(ctx, server.InstanceID(), "check", []byte("x"))
	wantCode(t, "Sync", err, velo.InvalidArgument, "check x: empty name")

	_, err = velo.TypedUnary[int](ctx, caller, server.InstanceID(), "spend", 3)
	wantCode(t, "TypedUnary", err, velo.UserCodeMin+1, "spend 3: test: quota used up")
	if !errors.Is(err, errQuota) || errors.Is(err, velo.ErrLaneFull) {
		t.Fatalf("TypedUnary: %v does not match its sentinel alone", err)
	}

	got := make(chan error, 1)
	must(t, caller.UnaryAsync(ctx, server.InstanceID(), "find", []byte("9"), func(_ []byte, err error) { got <- err }))
	wantCode(t, "UnaryAsync", <-got, velo.NotFound, "no user 9")

	_, err = caller.Unary(ctx, server.InstanceID(), "plain", nil)
	wantCode(t, "a plain error", err, velo.Unknown, "just text")

	// The messenger's own refusals have codes too.
	_, err = caller.Unary(ctx, server.InstanceID(), "missing", nil)
	if velo.ErrorCode(err) != velo.Unimplemented || !errors.Is(err, velo.ErrUnknownHandler) {
		t.Fatalf("missing handler: %v has code %v", err, velo.ErrorCode(err))
	}
	if velo.ErrorCode(nil) != velo.OK {
		t.Fatal("ErrorCode(nil) is not OK")
	}
}

// wantCode checks that err unwraps to a *velo.Error with code and message.
func wantCode(t *testing.T, what string, err error, code velo.Code, msg string) {
	t.Helper()
	var e *velo.Error
	if !errors.As(err, &e) || e.Code() != code || e.Message() != msg || velo.ErrorCode(err) != code {
		t.Fatalf("%s: %v (code %v), want code %v and message %q", what, err, velo.ErrorCode(err), code, msg)
	}
}

// TestWithOpNamesTheOperation: a call made WithOp names its op in the
// error's text, not the handler, for both Unary and UnaryAsync.
func TestWithOpNamesTheOperation(t *testing.T) {
	caller, server := pair(t, nil, nil)
	ctx := testCtx(t)
	must(t, server.Register(velo.UnaryHandler("lookup_v2", func(*velo.Context) ([]byte, error) {
		return nil, velo.NewError(velo.NotFound, "catalog: no such item")
	})))
	_, err := caller.Unary(ctx, server.InstanceID(), "lookup_v2", nil, messenger.WithOp("catalog lookup"))
	if err == nil || err.Error() != "catalog lookup: no such item" {
		t.Fatalf("Unary WithOp: %v", err)
	}
	got := make(chan error, 1)
	must(t, caller.UnaryAsync(ctx, server.InstanceID(), "lookup_v2", nil, func(_ []byte, err error) { got <- err }, velo.WithOp("catalog lookup")))
	if err := <-got; err == nil || strings.Contains(err.Error(), "lookup_v2") {
		t.Fatalf("UnaryAsync WithOp: %v", err)
	}
}

// TestHandlerErrorDropsMessengerReasons: a handler that returns a
// downstream node's ErrShuttingDown keeps its code (Unavailable) but not
// the reason: the caller must not take the downstream node's shutdown for
// the handler's node's.
func TestHandlerErrorDropsMessengerReasons(t *testing.T) {
	caller, server := pair(t, nil, nil)
	ctx := testCtx(t)
	must(t, server.Register(velo.UnaryHandler("relay", func(*velo.Context) ([]byte, error) {
		return nil, fmt.Errorf("downstream: %w", &messenger.RemoteError{Message: "velo: shutting down", Code: velo.Unavailable, Reason: "shutting_down"})
	})))
	_, err := caller.Unary(ctx, server.InstanceID(), "relay", nil)
	if errors.Is(err, velo.ErrShuttingDown) || velo.ErrorCode(err) != velo.Unavailable {
		t.Fatalf("relay: %v (code %v), want Unavailable without the shutting_down reason", err, velo.ErrorCode(err))
	}
}
