package msgrx_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/velo-go/velo/ext"
	"github.com/velo-go/velo/internal/msgrx"
	"github.com/velo-go/velo/internal/msgwire"
	"github.com/velo-go/velo/messenger"
	"github.com/velo-go/velo/transport/tcp"
)

func newMessenger(t *testing.T) *messenger.Messenger {
	t.Helper()
	tr, err := tcp.New()
	if err != nil {
		t.Fatal(err)
	}
	m, err := messenger.New(context.Background(), messenger.Config{Transports: []ext.Transport{tr}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		m.Shutdown(ctx)
	})
	return m
}

// TestEntryPointsReachMessenger calls through msgrx into two live
// messengers: each entry point lands on the method it names.
func TestEntryPointsReachMessenger(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	a, b := newMessenger(t), newMessenger(t)
	posted := make(chan msgwire.ResponseType, 1)
	if err := msgrx.RegisterSystem(b, messenger.FireHandler("_msgrx_post", func(c *messenger.Context) {
		posted <- msgrx.ResponseTypeOf(c)
	})); err != nil {
		t.Fatal(err)
	}
	if err := msgrx.RegisterSystem(b, messenger.UnaryHandler("_msgrx_hold", func(c *messenger.Context) ([]byte, error) {
		<-c.Context().Done() // answers only when the call is gone
		return nil, nil
	})); err != nil {
		t.Fatal(err)
	}
	if err := b.Register(messenger.FireHandler("_user", func(*messenger.Context) {})); !errors.Is(err, messenger.ErrReservedName) {
		t.Fatalf("Register of a '_' name: %v, want ErrReservedName", err)
	}
	if err := a.RegisterPeer(b.PeerInfo()); err != nil {
		t.Fatal(err)
	}
	if err := msgrx.Handshake(a, ctx, b.InstanceID()); err != nil {
		t.Fatal(err)
	}
	if n := msgrx.Handshakes(a); n < 1 {
		t.Errorf("Handshakes = %d after a handshake", n)
	}
	if id, ok := msgrx.InstanceOf(a, b.WorkerID()); !ok || id != b.InstanceID() {
		t.Errorf("InstanceOf = %v, %v; want %v", id, ok, b.InstanceID())
	}
	if info, ok := msgrx.PeerInfoOf(a, b.WorkerID()); !ok || info.InstanceID != b.InstanceID() {
		t.Errorf("PeerInfoOf = %v, %v", info.InstanceID, ok)
	}
	if n := msgrx.Lanes(a, b.InstanceID()); n < 1 {
		t.Errorf("Lanes = %d", n)
	}
	if n := msgrx.StagingThreshold(a); n != 0 {
		t.Errorf("StagingThreshold without a stager = %d", n)
	}
	if err := msgrx.Post(a, b.InstanceID(), "_msgrx_post", []byte("x")); err != nil {
		t.Fatal(err)
	}
	select {
	case rt := <-posted:
		if rt != msgwire.FireAndForget {
			t.Errorf("ResponseTypeOf = %v, want fire_and_forget", rt)
		}
	case <-ctx.Done():
		t.Fatal("posted message never arrived")
	}

	// A named call abandoned before its answer completes with the error.
	done := make(chan error, 1)
	call, err := msgrx.UnaryAsyncCall(a, ctx, b.InstanceID(), "_msgrx_hold", nil, func(_ []byte, err error) { done <- err })
	if err != nil {
		t.Fatal(err)
	}
	gone := errors.New("abandoned")
	if !call.Abandon(gone) {
		t.Fatal("Abandon of a call in flight reported false")
	}
	if err := <-done; err != gone {
		t.Errorf("callback got %v, want the abandon error", err)
	}
	if call.Abandon(gone) {
		t.Error("a second Abandon reported true")
	}
	if (msgrx.AsyncCall{}).Abandon(gone) {
		t.Error("the zero AsyncCall abandoned something")
	}

	select {
	case <-msgrx.Stopped(a):
		t.Fatal("Stopped closed before Shutdown")
	default:
	}
	tore := make(chan struct{})
	msgrx.OnTeardown(a, func() { close(tore) })
	a.Shutdown(ctx)
	<-tore
	<-msgrx.Stopped(a)
}
