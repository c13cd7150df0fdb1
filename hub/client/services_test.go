package client_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"sync"
	"testing"

	"github.com/velo-go/velo/ext"
	"github.com/velo-go/velo/hub"
	"github.com/velo-go/velo/hub/client"
)

// hubNames is what the hub's directory says id serves.
func hubNames(t *testing.T, h *hub.Hub, hc *client.HubClient, id ext.InstanceID) []string {
	t.Helper()
	ctx := context.Background()
	names, err := hc.Services().ListServices(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, n := range names {
		ids, err := hc.Services().ListService(ctx, n)
		if err != nil {
			t.Fatal(err)
		}
		if slices.Contains(ids, id) {
			out = append(out, n)
		}
	}
	slices.Sort(out)
	return out
}

// TestRegistrationCarriesServices: guards taken before Register ride on
// the registration (no service write is sent), one guard per name, and a
// re-registration sets the hub's names to exactly the client's.
func TestRegistrationCarriesServices(t *testing.T) {
	ctx := context.Background()
	h := startHub(t, hubConfig())
	p := newLossyProxy(t, ctlURL(h))
	node, hc := viaProxy(t, h, p)
	a, err := hc.RegisterService(ctx, "a")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := hc.RegisterService(ctx, "a"); !errors.Is(err, client.ErrServiceHeld) {
		t.Fatalf("second guard for one name: %v", err)
	}
	if _, err := hc.RegisterService(ctx, ".."); err == nil {
		t.Fatal("a name that is a path step was taken")
	}
	if _, err := hc.RegisterService(ctx, "b"); err != nil {
		t.Fatal(err)
	}
	if err := hc.Register(ctx, node); err != nil {
		t.Fatal(err)
	}
	if p.puts.Load() != 0 {
		t.Fatalf("%d service writes sent; the registration carries the names", p.puts.Load())
	}
	if got := hubNames(t, h, hc, node.InstanceID()); !slices.Equal(got, []string{"a", "b"}) {
		t.Fatalf("hub names %v", got)
	}
	a.Close()
	if got := hubNames(t, h, hc, node.InstanceID()); !slices.Equal(got, []string{"b"}) {
		t.Fatalf("after closing a: %v", got)
	}
	if err := hc.Register(ctx, node); err != nil {
		t.Fatal(err)
	}
	if got := hubNames(t, h, hc, node.InstanceID()); !slices.Equal(got, []string{"b"}) {
		t.Fatalf("after re-registration: %v", got)
	}
}

// TestServicesSyncedOneAtATime: many goroutines take and drop guards at
// once while registrations run; the client never has two service writes
// (or a write and a registration) in flight, and in the end the hub's
// names are exactly the guards still held. A write whose answer is lost
// is unsettled and sent again on the next pass.
func TestServicesSyncedOneAtATime(t *testing.T) {
	ctx := context.Background()
	h := startHub(t, hubConfig())
	p := newLossyProxy(t, ctlURL(h))
	node, hc := viaProxy(t, h, p)
	if err := hc.Register(ctx, node); err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	var mu sync.Mutex
	kept := []string{}
	for g := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range 6 {
				name := fmt.Sprintf("s%d-%d", g, i)
				guard, err := hc.RegisterService(ctx, name)
				if err != nil {
					t.Error(err)
					return
				}
				if i%2 == 0 {
					guard.Close()
				} else {
					mu.Lock()
					kept = append(kept, name)
					mu.Unlock()
				}
				if g == 0 && i == 3 {
					if err := hc.Register(ctx, node); err != nil {
						t.Error(err)
					}
				}
			}
		}()
	}
	wg.Wait()
	if err := hc.SyncServices(ctx); err != nil {
		t.Fatal(err)
	}
	if m := p.maxPut.Load(); m != 1 {
		t.Fatalf("%d service writes and registrations were in flight at once, want 1", m)
	}
	slices.Sort(kept)
	if got := hubNames(t, h, hc, node.InstanceID()); !slices.Equal(got, kept) {
		t.Fatalf("hub names\n%v\nwant\n%v", got, kept)
	}

	// A DELETE whose answer is lost leaves the name unsettled; the guard
	// taken again for it is sent again, so the hub serves it.
	p.setRule(once("drop", func(r *http.Request) bool { return r.Method == "DELETE" }))
	g, err := hc.RegisterService(ctx, "flap")
	if err != nil {
		t.Fatal(err)
	}
	if err := g.Unregister(ctx); err == nil {
		t.Fatal("a DELETE whose answer was lost reported success")
	}
	before := p.puts.Load()
	if _, err := hc.RegisterService(ctx, "flap"); err != nil {
		t.Fatal(err)
	}
	if err := hc.SyncServices(ctx); err != nil {
		t.Fatal(err)
	}
	if p.puts.Load() == before {
		t.Fatal("the unsettled name was not sent again")
	}
	if got := hubNames(t, h, hc, node.InstanceID()); !slices.Contains(got, "flap") {
		t.Fatalf("the hub does not serve flap: %v", got)
	}
}
