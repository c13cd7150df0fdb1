package hub

import (
	"context"
	"encoding/json"
	"errors"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/velo-go/velo/hub/protocol"
	"github.com/velo-go/velo/hub/store"
)

// TestLostAnswerProbesFreeTheEntry: a registrant that never got its
// registration's answer answers the hub's heartbeat with ok: false; the
// hub counts that as a failure and, after heartbeat_max_failures in a
// row, removes the entry, so the registrant can register again without a
// credential. A registrant that answers ok stays.
func TestLostAnswerProbesFreeTheEntry(t *testing.T) {
	rec := newRecorder("rec")
	h := startHub(t, testConfig(), veloTCP(t), WithExtension(rec))
	alive, lost := startRegistrant(t), startRegistrant(t)
	lost.ok.Store(false)
	register(t, h, alive.node.PeerInfo(), "", nil)
	register(t, h, lost.node.PeerInfo(), "", nil) // its answer "lost": it says ok false
	got := rec.waitRemoved(t, lost.node.InstanceID())
	if got.inc == 0 {
		t.Fatal("removal without an incarnation")
	}
	if _, ok := h.Store().Get(lost.node.InstanceID()); ok {
		t.Fatal("the unusable entry is still stored")
	}
	waitUnlocked(h) // the delivery that ran on_removed drops the owner before it lets the lock go
	if g := h.auth.get(lost.node.InstanceID()); g != nil {
		t.Fatalf("the owner is not free after its removal was delivered: %+v", g)
	}
	lost.ok.Store(true)
	register(t, h, lost.node.PeerInfo(), "", nil)
	if _, ok := h.Store().Get(alive.node.InstanceID()); !ok {
		t.Fatal("a registrant that answers ok was removed")
	}
	// The hub's own pinned entry is in the store and is never probed.
	if e, ok := h.Store().Get(h.Node().InstanceID()); !ok || !e.Pinned {
		t.Fatalf("pinned entry: %+v %v", e, ok)
	}
	// The on-demand probe answers over velo.
	st, b := call(t, "POST", ctl(h)+protocol.ProbePath(alive.node.InstanceID()), nil, "")
	var pr protocol.ProbeResponse
	if st != 200 || json.Unmarshal(b, &pr) != nil || !pr.OK {
		t.Fatalf("probe: %d %s", st, b)
	}
}

// sharedStore lets two hub runs use one InMemoryStore, as a restart on a
// persistent store does: it installs the store's hook once and forwards
// to the current run's hook, and Close does not close the store. The
// store calls the forwarder from its own goroutines (the reaper, a
// remove) while a hub installs or drops its hook, so the current hook is
// an atomic pointer and the one install is a sync.Once.
type sharedStore struct {
	*store.InMemoryStore
	once    sync.Once
	onceErr error
	hook    atomic.Pointer[store.RemovalHook]
}

func (s *sharedStore) InstallRemovalHook(hook store.RemovalHook) ([]store.Entry, error) {
	s.once.Do(func() {
		_, s.onceErr = s.InMemoryStore.InstallRemovalHook(func(r store.Removal) {
			if h := s.hook.Load(); h != nil {
				(*h)(r)
			}
		})
	})
	if s.onceErr != nil {
		return nil, s.onceErr
	}
	s.hook.Store(&hook)
	return s.List(), nil
}

func (s *sharedStore) Close(context.Context) error { s.hook.Store(nil); return nil }

// TestRestartRecovers: a hub that starts on a store with registrations
// reserves them. A route called with the credential answers recovered;
// a registration presenting it re-registers (recovered: true, a new
// credential and epoch); one without it, or with a forged one, is
// refused. The hub's velo node knows the peer again, so its probes keep
// a live registrant.
func TestRestartRecovers(t *testing.T) {
	mem, err := store.NewInMemoryStore()
	if err != nil {
		t.Fatal(err)
	}
	shared := &sharedStore{InMemoryStore: mem}
	defer mem.Close(context.Background())
	reg := startRegistrant(t)
	h1, err := New(testConfig(), WithStore(shared), veloTCP(t))
	if err != nil {
		t.Fatal(err)
	}
	if err := h1.Serve(context.Background()); err != nil {
		t.Fatal(err)
	}
	r1 := register(t, h1, reg.node.PeerInfo(), "", map[string]any{"services": map[string]any{"names": []string{"llm"}}})
	if err := h1.Shutdown(context.Background()); err != nil {
		t.Fatal(err)
	}
	if _, ok := mem.Get(h1.Node().InstanceID()); ok {
		t.Fatal("the first hub's pinned entry outlived its shutdown")
	}

	h2 := startHub(t, testConfig(), WithStore(shared), veloTCP(t))
	if h2.ID() == h1.ID() {
		t.Fatal("a restarted hub kept its id")
	}
	p := reg.node.PeerInfo()
	st, b := call(t, "POST", ctl(h2)+protocol.HeartbeatPath(p.InstanceID), nil, r1.Credential)
	wantCode(t, "heartbeat after restart", st, b, protocol.CodeRecovered, 409)
	st, b = call(t, "POST", ctl(h2)+protocol.PathInstances, regBody(t, p, nil), "")
	wantCode(t, "claim without credential", st, b, protocol.CodeUnauthorized, 401)
	st, b = call(t, "POST", ctl(h2)+protocol.PathInstances, regBody(t, p, nil), protocol.NewCredential())
	wantCode(t, "claim with a forged credential", st, b, protocol.CodeUnauthorized, 401)
	if st, b := call(t, "GET", pub(h2)+protocol.PeerByInstancePath(p.InstanceID), nil, ""); st != 200 {
		t.Fatalf("peer lookup of a reserved entry: %d %s", st, b)
	}
	r2 := register(t, h2, p, r1.Credential, map[string]any{"services": map[string]any{"names": []string{"llm"}}})
	if !r2.Recovered || r2.Epoch <= r1.Epoch || r2.HubID != h2.ID() {
		t.Fatalf("recovery: %+v", r2)
	}
	if _, err := h2.Authority().Authorize(p.InstanceID, r1.Credential); !errors.Is(err, protocol.CodeUnauthorized) {
		t.Fatalf("the pre-restart credential after recovery: %v", err)
	}
	if _, err := h2.Authority().Authorize(p.InstanceID, r2.Credential); err != nil {
		t.Fatalf("the new credential: %v", err)
	}
	// The services came back with the registration.
	st, b = call(t, "GET", pub(h2)+protocol.ServicePath("llm"), nil, "")
	var si protocol.ServiceInstances
	if st != 200 || json.Unmarshal(b, &si) != nil || len(si.Instances) != 1 || si.Instances[0] != p.InstanceID {
		t.Fatalf("services after recovery: %d %s", st, b)
	}
}

// TestSharedStoreHookSwap: a hub run installs its hook while the store
// calls the forwarder from another goroutine (here, removes); under -race
// this fails if the current hook is not synchronised.
func TestSharedStoreHookSwap(t *testing.T) {
	mem, err := store.NewInMemoryStore()
	if err != nil {
		t.Fatal(err)
	}
	defer mem.Close(context.Background())
	s := &sharedStore{InMemoryStore: mem}
	var heard atomic.Int32
	if _, err := s.InstallRemovalHook(func(store.Removal) { heard.Add(1) }); err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		for range 50 {
			p := fakePeer()
			inc, err := mem.Put(context.Background(), store.NewOpID(), store.Record{Peer: p, Epoch: 1}, 0)
			if err == nil {
				_ = mem.Remove(context.Background(), p.InstanceID, inc)
			}
		}
	}()
	for range 50 {
		if _, err := s.InstallRemovalHook(func(store.Removal) { heard.Add(1) }); err != nil {
			t.Fatal(err)
		}
		_ = s.Close(context.Background())
	}
	<-done
}
