package discoverytest

import (
	"context"
	"slices"
	"testing"

	"github.com/velo-go/velo/ext"
)

// ServiceOpener returns a new client of one shared backend each time it is
// called, as PeerOpener does.
type ServiceOpener func(t *testing.T) ext.ServiceDiscovery

// RunService runs the service discovery suite against a backend.
func RunService(t *testing.T, open ServiceOpener) {
	t.Run("UnknownIsEmpty", func(t *testing.T) { svcUnknown(t, open) })
	t.Run("RegisterListUnregister", func(t *testing.T) { svcRegister(t, open) })
	t.Run("GuardRemoves", func(t *testing.T) { svcGuard(t, open) })
	t.Run("ListServices", func(t *testing.T) { svcNames(t, open) })
	t.Run("Watch", func(t *testing.T) { svcWatch(t, open) })
}

// serviceName returns a name no other test uses.
func serviceName() string { return "svc-" + ext.NewInstanceID().String()[:8] }

// MustList fails the test unless the service holds exactly want.
func MustList(t *testing.T, d ext.ServiceDiscovery, service string, want ...ext.InstanceID) {
	t.Helper()
	got, err := d.ListService(ctxT(t), service)
	if err != nil {
		t.Fatal(err)
	}
	if !sameSet(got, want) {
		t.Fatalf("service %s: got %v, want %v", service, got, want)
	}
}

func sameSet(a, b []ext.InstanceID) bool {
	if len(a) != len(b) {
		return false
	}
	for _, x := range a {
		if !slices.Contains(b, x) {
			return false
		}
	}
	return true
}

func svcUnknown(t *testing.T, open ServiceOpener) {
	MustList(t, open(t), serviceName())
}

func svcRegister(t *testing.T, open ServiceOpener) {
	a, b := open(t), open(t)
	ctx, name := ctxT(t), serviceName()
	x, y := ext.NewInstanceID(), ext.NewInstanceID()
	for _, id := range []ext.InstanceID{x, y} {
		if err := a.RegisterService(ctx, name, id); err != nil {
			t.Fatal(err)
		}
	}
	MustList(t, b, name, x, y)
	if err := a.UnregisterService(ctx, name, x); err != nil {
		t.Fatal(err)
	}
	MustList(t, b, name, y)
	if err := a.UnregisterService(ctx, name, x); err != nil {
		t.Fatalf("second unregister: %v", err)
	}
	if err := a.UnregisterService(ctx, name, y); err != nil {
		t.Fatal(err)
	}
	MustList(t, b, name)
}

func svcGuard(t *testing.T, open ServiceOpener) {
	a, b := open(t), open(t)
	r, ok := a.(ext.ServiceRegistrar)
	if !ok {
		t.Skip("backend has no guarded registration")
	}
	ctx, name, id := ctxT(t), serviceName(), ext.NewInstanceID()
	g, err := r.RegisterServiceInstance(ctx, name, id)
	if err != nil {
		t.Fatal(err)
	}
	MustList(t, b, name, id)
	if err := g.Unregister(ctx); err != nil {
		t.Fatal(err)
	}
	MustList(t, b, name)
	if err := g.Unregister(ctx); err != nil {
		t.Fatalf("second unregister: %v", err)
	}
}

func svcNames(t *testing.T, open ServiceOpener) {
	a, b := open(t), open(t)
	l, ok := b.(ext.ServiceLister)
	if !ok {
		t.Skip("backend cannot list services")
	}
	ctx, name, id := ctxT(t), serviceName(), ext.NewInstanceID()
	if err := a.RegisterService(ctx, name, id); err != nil {
		t.Fatal(err)
	}
	names, err := l.ListServices(ctx)
	if err != nil || !slices.Contains(names, name) {
		t.Fatalf("list services: %v, %v (want %s)", names, err, name)
	}
	if err := a.UnregisterService(ctx, name, id); err != nil {
		t.Fatal(err)
	}
	names, err = l.ListServices(ctx)
	if err != nil || slices.Contains(names, name) {
		t.Fatalf("list services after unregister: %v, %v (%s should be gone)", names, err, name)
	}
}

func svcWatch(t *testing.T, open ServiceOpener) {
	a, b := open(t), open(t)
	w, ok := b.(ext.ServiceWatcher)
	if !ok {
		t.Skip("backend cannot watch")
	}
	ctx, cancel := context.WithTimeout(context.Background(), Wait)
	defer cancel()
	name, first, second := serviceName(), ext.NewInstanceID(), ext.NewInstanceID()
	if err := a.RegisterService(ctx, name, first); err != nil {
		t.Fatal(err)
	}
	ch, err := w.WatchService(ctx, name)
	if err != nil {
		t.Fatal(err)
	}
	expect(t, ch, ext.ServiceEvent{Kind: ext.ServiceInitial, IDs: []ext.InstanceID{first}})
	if err := a.RegisterService(ctx, name, second); err != nil {
		t.Fatal(err)
	}
	expect(t, ch, ext.ServiceEvent{Kind: ext.ServiceAdded, IDs: []ext.InstanceID{second}})
	if err := a.UnregisterService(ctx, name, first); err != nil {
		t.Fatal(err)
	}
	expect(t, ch, ext.ServiceEvent{Kind: ext.ServiceRemoved, IDs: []ext.InstanceID{first}})
	cancel()
	for range ch { // closes once ctx ends
	}
}

func expect(t *testing.T, ch <-chan ext.ServiceEvent, want ext.ServiceEvent) {
	t.Helper()
	select {
	case got, ok := <-ch:
		if !ok || got.Kind != want.Kind || !sameSet(got.IDs, want.IDs) {
			t.Fatalf("watch: got %+v (open %v), want %+v", got, ok, want)
		}
	case <-ctxT(t).Done():
		t.Fatalf("watch: no event, want %+v", want)
	}
}
