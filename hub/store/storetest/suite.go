package storetest

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/velo-go/velo/ext"
	"github.com/velo-go/velo/hub/store"
)

// Options are what the suite asks a store to be built with.
type Options struct {
	// TTL of untouched entries.
	TTL time.Duration
	// Now is the clock for touches and expiry. The suite moves it by
	// hand and calls store.Reaper's Reap, so the store's own reaper
	// should not run more often than about once a TTL.
	Now func() time.Time
}

// Factory builds stores for the suite.
type Factory struct {
	// New builds an empty store, not shared with any other test.
	New func(t testing.TB, o Options) store.Store
	// Remote says the store's writes can apply after their answer is
	// lost. The suite then requires that a Put whose op id ResolveWrite
	// already read back is refused.
	Remote bool
}

// Run runs every test of the suite as a subtest of t.
func Run(t *testing.T, f Factory) {
	tests := []struct {
		name string
		fn   func(*testing.T, *harness)
	}{
		{"IncarnationsGrow", testIncarnationsGrow},
		{"ConditionalOps", testConditionalOps},
		{"ReadsCopy", testReadsCopy},
		{"Lookups", testLookups},
		{"HookSnapshotOnePoint", testHookSnapshot},
		{"HookBeforeReturn", testHookBeforeReturn},
		{"HookHearsRacedRemoval", testHookRaced},
		{"HookOnce", testHookOnce},
		{"TTLExpiry", testTTL},
		{"OpIDReadBack", testOpID},
		{"ContinuityAndClose", testContinuity},
		{"ConcurrentWriters", testConcurrentWriters},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			h := newHarness(t, f)
			tc.fn(t, h)
		})
	}
}

// harness holds one store and its hand-moved clock.
type harness struct {
	s      store.Store
	mu     sync.Mutex
	now    time.Time
	ttl    time.Duration
	ctx    context.Context
	heard  *recorder
	remote bool
}

func newHarness(t *testing.T, f Factory) *harness {
	h := &harness{now: time.Unix(1_700_000_000, 0), ttl: 30 * time.Second, heard: &recorder{}, remote: f.Remote}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	h.ctx = ctx
	h.s = f.New(t, Options{TTL: h.ttl, Now: h.clock})
	t.Cleanup(func() {
		cctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := h.s.Close(cctx); err != nil {
			t.Errorf("Close: %v", err)
		}
	})
	return h
}

func (h *harness) clock() time.Time {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.now
}

func (h *harness) advance(d time.Duration) {
	h.mu.Lock()
	h.now = h.now.Add(d)
	h.mu.Unlock()
}

// install installs the recorder as the hook and returns the snapshot.
func (h *harness) install(t *testing.T) []store.Entry {
	t.Helper()
	snap, err := h.s.InstallRemovalHook(h.heard.hook)
	if err != nil {
		t.Fatalf("InstallRemovalHook: %v", err)
	}
	return snap
}

func (h *harness) put(t *testing.T, rec store.Record, expect store.Incarnation) store.Incarnation {
	t.Helper()
	inc, err := h.s.Put(h.ctx, store.NewOpID(), rec, expect)
	if err != nil {
		t.Fatalf("Put %s expecting %d: %v", rec.Peer.InstanceID, expect, err)
	}
	return inc
}

// recorder is a removal hook that remembers what it heard.
type recorder struct {
	mu    sync.Mutex
	heard []store.Removal
}

func (r *recorder) hook(rm store.Removal) {
	r.mu.Lock()
	r.heard = append(r.heard, rm)
	r.mu.Unlock()
}

func (r *recorder) all() []store.Removal {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]store.Removal(nil), r.heard...)
}

// has reports how many times the hook heard the incarnation inc.
func (r *recorder) count(inc store.Incarnation) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	n := 0
	for _, rm := range r.heard {
		if rm.Incarnation == inc {
			n++
		}
	}
	return n
}

// Record builds a record for id with an address and the epoch.
func Record(id ext.InstanceID, epoch uint64) store.Record {
	return store.Record{
		Peer:  ext.PeerInfo{InstanceID: id, Address: ext.WorkerAddress{"tcp": []byte("127.0.0.1:4000")}},
		Epoch: protoEpoch(epoch),
	}
}
