package discoverytest

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/velo-go/velo/ext"
)

// Wait bounds every call and wait in the suites.
const Wait = 10 * time.Second

// PeerOpener returns a new client of one shared backend each time it is
// called: two clients stand for two processes. The client is closed by the
// opener through t.Cleanup.
type PeerOpener func(t *testing.T) ext.PeerDiscovery

// RunPeer runs the peer discovery suite against a backend.
func RunPeer(t *testing.T, open PeerOpener) {
	t.Run("UnknownIsNotFound", func(t *testing.T) { peerUnknown(t, open) })
	t.Run("RegisterThenDiscover", func(t *testing.T) { peerRegister(t, open) })
	t.Run("UnregisterRemoves", func(t *testing.T) { peerUnregister(t, open) })
	t.Run("GuardRemoves", func(t *testing.T) { peerGuard(t, open) })
	t.Run("ManyClientsSeeEachOther", func(t *testing.T) { peerMany(t, open) })
	t.Run("WatchSeesRemoval", func(t *testing.T) { peerWatch(t, open) })
}

// NewPeer returns a PeerInfo with a fresh instance id and a fake address.
func NewPeer() ext.PeerInfo {
	id := ext.NewInstanceID()
	addr := ext.WorkerAddress{"tcp": []byte("127.0.0.1:" + id.String()[:4])}
	return ext.PeerInfo{InstanceID: id, Address: addr}
}

func ctxT(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), Wait)
	t.Cleanup(cancel)
	return ctx
}

// SamePeer reports whether two PeerInfo values carry the same id and address.
func SamePeer(a, b ext.PeerInfo) bool {
	return a.InstanceID == b.InstanceID && string(a.Address.Encode()) == string(b.Address.Encode())
}

// MustFind fails the test unless d resolves info by instance and worker id.
func MustFind(t *testing.T, d ext.PeerDiscovery, info ext.PeerInfo) {
	t.Helper()
	ctx := ctxT(t)
	got, err := d.DiscoverInstance(ctx, info.InstanceID)
	if err != nil || !SamePeer(got, info) {
		t.Fatalf("discover instance %s: got %+v, %v", info.InstanceID, got, err)
	}
	got, err = d.DiscoverWorker(ctx, info.WorkerID())
	if err != nil || !SamePeer(got, info) {
		t.Fatalf("discover worker %s: got %+v, %v", info.WorkerID(), got, err)
	}
}

// MustNotFind fails the test unless both lookups fail with ErrPeerNotFound.
func MustNotFind(t *testing.T, d ext.PeerDiscovery, info ext.PeerInfo) {
	t.Helper()
	ctx := ctxT(t)
	if _, err := d.DiscoverInstance(ctx, info.InstanceID); !errors.Is(err, ext.ErrPeerNotFound) {
		t.Fatalf("discover instance %s: want ErrPeerNotFound, got %v", info.InstanceID, err)
	}
	if _, err := d.DiscoverWorker(ctx, info.WorkerID()); !errors.Is(err, ext.ErrPeerNotFound) {
		t.Fatalf("discover worker %s: want ErrPeerNotFound, got %v", info.WorkerID(), err)
	}
}

func peerUnknown(t *testing.T, open PeerOpener) {
	MustNotFind(t, open(t), NewPeer())
}

func peerRegister(t *testing.T, open PeerOpener) {
	a, b := open(t), open(t)
	info := NewPeer()
	if err := a.Register(ctxT(t), info); err != nil {
		t.Fatal(err)
	}
	MustFind(t, b, info)
	MustFind(t, a, info)
}

func peerUnregister(t *testing.T, open PeerOpener) {
	a, b := open(t), open(t)
	info, other := NewPeer(), NewPeer()
	ctx := ctxT(t)
	for _, p := range []ext.PeerInfo{info, other} {
		if err := a.Register(ctx, p); err != nil {
			t.Fatal(err)
		}
	}
	if err := a.Unregister(ctx, info.InstanceID); err != nil {
		t.Fatal(err)
	}
	MustNotFind(t, b, info)
	MustFind(t, b, other) // the other entry is untouched
	if err := a.Unregister(ctx, info.InstanceID); err != nil {
		t.Fatalf("second unregister: %v", err)
	}
	if err := a.Register(ctx, info); err != nil {
		t.Fatalf("register again: %v", err)
	}
	MustFind(t, b, info)
}

func peerGuard(t *testing.T, open PeerOpener) {
	a, b := open(t), open(t)
	r, ok := a.(ext.PeerRegistrar)
	if !ok {
		t.Skip("backend has no guarded registration")
	}
	info := NewPeer()
	ctx := ctxT(t)
	g, err := r.RegisterPeer(ctx, info)
	if err != nil {
		t.Fatal(err)
	}
	MustFind(t, b, info)
	if err := g.Unregister(ctx); err != nil {
		t.Fatal(err)
	}
	MustNotFind(t, b, info)
	if err := g.Unregister(ctx); err != nil {
		t.Fatalf("second unregister: %v", err)
	}
}

// peerMany: three clients register at once; each finds the other two.
func peerMany(t *testing.T, open PeerOpener) {
	const n = 3
	ds := make([]ext.PeerDiscovery, n)
	infos := make([]ext.PeerInfo, n)
	for i := range ds {
		ds[i], infos[i] = open(t), NewPeer()
	}
	var wg sync.WaitGroup
	errs := make([]error, n)
	for i := range ds {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[i] = ds[i].Register(ctxT(t), infos[i])
		}()
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		t.Fatal(err)
	}
	for i := range ds {
		for j := range infos {
			MustFind(t, ds[i], infos[j])
		}
	}
}

// peerWatch: an entry present when the watch starts is reported once it
// is removed. (A polling backend may miss an entry that comes and goes
// between two reads, so the suite does not ask for that.)
func peerWatch(t *testing.T, open PeerOpener) {
	a, b := open(t), open(t)
	w, ok := b.(ext.PeerWatcher)
	if !ok {
		t.Skip("backend reports no removals")
	}
	ctx, cancel := context.WithTimeout(context.Background(), Wait)
	defer cancel()
	info := NewPeer()
	if err := a.Register(ctx, info); err != nil {
		t.Fatal(err)
	}
	ch, err := w.WatchPeerRemovals(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := a.Unregister(ctx, info.InstanceID); err != nil {
		t.Fatal(err)
	}
	if err := WaitRemoval(ctx, ch, info.InstanceID); err != nil {
		t.Fatal(err)
	}
	cancel()
	for range ch { // the channel closes once ctx ends
	}
}

// WaitRemoval reads ch until it reports id, the channel closes or ctx ends.
func WaitRemoval(ctx context.Context, ch <-chan ext.InstanceID, id ext.InstanceID) error {
	for {
		select {
		case got, ok := <-ch:
			if !ok {
				return fmt.Errorf("watch closed before %s was removed", id)
			}
			if got == id {
				return nil
			}
		case <-ctx.Done():
			return fmt.Errorf("no removal of %s: %w", id, ctx.Err())
		}
	}
}
