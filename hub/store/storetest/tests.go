package storetest

import (
	"encoding/json"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/velo-go/velo/ext"
	"github.com/velo-go/velo/hub/protocol"
	"github.com/velo-go/velo/hub/store"
)

func protoEpoch(e uint64) protocol.Epoch { return protocol.Epoch(e) }

func testIncarnationsGrow(t *testing.T, h *harness) {
	id := ext.NewInstanceID()
	var last store.Incarnation
	for i := range 5 {
		inc := h.put(t, Record(id, uint64(i)), last)
		if inc <= last {
			t.Fatalf("write %d got incarnation %d, not above %d", i, inc, last)
		}
		last = inc
	}
	if err := h.s.Remove(h.ctx, id, last); err != nil {
		t.Fatal(err)
	}
	// A new entry of the same instance is above every earlier one.
	if inc := h.put(t, Record(id, 9), 0); inc <= last {
		t.Fatalf("re-created entry at %d, not above %d", inc, last)
	}
	// Another instance's writes do not make this one's go back.
	other := h.put(t, Record(ext.NewInstanceID(), 1), 0)
	if other == 0 {
		t.Fatal("zero incarnation")
	}
}

func testConditionalOps(t *testing.T, h *harness) {
	id := ext.NewInstanceID()
	absent := ext.NewInstanceID()
	inc1 := h.put(t, Record(id, 1), 0)
	inc2 := h.put(t, Record(id, 2), inc1)

	if _, err := h.s.Put(h.ctx, store.NewOpID(), Record(id, 3), inc1); !errors.Is(err, store.ErrConflict) {
		t.Errorf("Put on a stale incarnation: %v, want ErrConflict", err)
	}
	if _, err := h.s.Put(h.ctx, store.NewOpID(), Record(id, 3), 0); !errors.Is(err, store.ErrConflict) {
		t.Errorf("Put creating an existing entry: %v, want ErrConflict", err)
	}
	if _, err := h.s.Put(h.ctx, store.NewOpID(), Record(absent, 1), inc2); !errors.Is(err, store.ErrConflict) {
		t.Errorf("Put replacing a missing entry: %v, want ErrConflict", err)
	}
	if err := h.s.Remove(h.ctx, id, inc1); !errors.Is(err, store.ErrConflict) {
		t.Errorf("Remove of a stale incarnation: %v, want ErrConflict", err)
	}
	if err := h.s.Touch(id, inc1); !errors.Is(err, store.ErrConflict) {
		t.Errorf("Touch of a stale incarnation: %v, want ErrConflict", err)
	}
	if err := h.s.Remove(h.ctx, absent, inc1); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("Remove of a missing entry: %v, want ErrNotFound", err)
	}
	if err := h.s.Touch(absent, inc1); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("Touch of a missing entry: %v, want ErrNotFound", err)
	}
	// The refused calls changed nothing.
	e, ok := h.s.Get(id)
	if !ok || e.Incarnation != inc2 || e.Epoch != 2 {
		t.Fatalf("entry after refused calls: %+v %v, want incarnation %d epoch 2", e, ok, inc2)
	}
	if err := h.s.Touch(id, inc2); err != nil {
		t.Errorf("Touch of the current incarnation: %v", err)
	}
}

func testReadsCopy(t *testing.T, h *harness) {
	id := ext.NewInstanceID()
	rec := Record(id, 1)
	rec.Extensions = map[string]json.RawMessage{"kv": json.RawMessage(`{"a":1}`)}
	rec.Credentials = []protocol.CredentialDigest{protocol.NewCredential().Digest()}
	h.put(t, rec, 0)
	rec.Extensions["kv"][2] = 'X' // the caller's copy changes after the Put
	e, _ := h.s.Get(id)
	if string(e.Extensions["kv"]) != `{"a":1}` {
		t.Fatalf("store shares the caller's payload: %s", e.Extensions["kv"])
	}
	e.Extensions["kv"][2] = 'Y'
	e.Credentials[0][0]++
	again, _ := h.s.Get(id)
	if string(again.Extensions["kv"]) != `{"a":1}` || again.Credentials[0] != rec.Credentials[0] {
		t.Fatalf("Get shares the store's record: %s", again.Extensions["kv"])
	}
	l := h.s.List()
	if len(l) != 1 || string(l[0].Extensions["kv"]) != `{"a":1}` || len(l[0].Credentials) != 1 {
		t.Fatalf("List: %+v", l)
	}
}

func testLookups(t *testing.T, h *harness) {
	ids := make([]ext.InstanceID, 5)
	incs := make(map[ext.InstanceID]store.Incarnation)
	for i := range ids {
		ids[i] = ext.NewInstanceID()
		rec := Record(ids[i], uint64(i+1))
		rec.Pinned = i == 0
		incs[ids[i]] = h.put(t, rec, 0)
	}
	for i, id := range ids {
		p, ok := h.s.LookupInstance(id)
		if !ok || p.Incarnation != incs[id] || p.Epoch != protocol.Epoch(i+1) || p.Pinned != (i == 0) {
			t.Errorf("LookupInstance %d: %+v %v", i, p, ok)
		}
		w, ok := h.s.LookupWorker(id.WorkerID())
		if !ok || w.Peer.InstanceID != id {
			t.Errorf("LookupWorker %d: %+v %v", i, w, ok)
		}
		if string(p.Peer.Address["tcp"]) != "127.0.0.1:4000" {
			t.Errorf("address %q", p.Peer.Address["tcp"])
		}
	}
	if _, ok := h.s.LookupInstance(ext.NewInstanceID()); ok {
		t.Error("found an instance never written")
	}
	if got := len(h.s.Peers()); got != len(ids) {
		t.Errorf("Peers has %d, want %d", got, len(ids))
	}
	if err := h.s.Remove(h.ctx, ids[1], incs[ids[1]]); err != nil {
		t.Fatal(err)
	}
	if _, ok := h.s.LookupWorker(ids[1].WorkerID()); ok {
		t.Error("worker lookup finds a removed entry")
	}
}

// testHookSnapshot installs the hook while writers create and remove
// entries, and checks that snapshot, hook and final state agree: each
// incarnation in the snapshot is either still present or was heard once,
// nothing present was heard, and nothing is heard twice.
func testHookSnapshot(t *testing.T, h *harness) {
	const writers, rounds = 4, 30
	for range 20 {
		h.put(t, Record(ext.NewInstanceID(), 1), 0)
	}
	var wg sync.WaitGroup
	start := make(chan struct{})
	for range writers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			for range rounds {
				id := ext.NewInstanceID()
				inc, err := h.s.Put(h.ctx, store.NewOpID(), Record(id, 1), 0)
				if err != nil {
					t.Errorf("Put: %v", err)
					return
				}
				if err := h.s.Remove(h.ctx, id, inc); err != nil {
					t.Errorf("Remove: %v", err)
					return
				}
			}
		}()
	}
	close(start)
	snap := h.install(t)
	wg.Wait()
	// Remove what the snapshot holds, too.
	for _, e := range snap {
		if cur, ok := h.s.Get(e.Peer.InstanceID); ok && cur.Incarnation == e.Incarnation {
			if err := h.s.Remove(h.ctx, e.Peer.InstanceID, e.Incarnation); err != nil {
				t.Fatal(err)
			}
		}
	}
	seen := map[store.Incarnation]int{}
	for _, rm := range h.heard.all() {
		seen[rm.Incarnation]++
	}
	for inc, n := range seen {
		if n != 1 {
			t.Errorf("incarnation %d heard %d times", inc, n)
		}
	}
	for _, e := range snap {
		if seen[e.Incarnation] != 1 {
			t.Errorf("snapshot entry %d removed after the snapshot but not heard", e.Incarnation)
		}
	}
	if got := len(h.s.List()); got != 0 {
		t.Errorf("%d entries left", got)
	}
	// Every entry made after the snapshot point and removed was heard; an
	// entry both made and removed before it was not. So the heard set is
	// the snapshot plus some of the writers' entries, never fewer than the
	// snapshot.
	if len(seen) < len(snap) {
		t.Errorf("heard %d, snapshot had %d", len(seen), len(snap))
	}
}

func testHookBeforeReturn(t *testing.T, h *harness) {
	h.install(t)
	id := ext.NewInstanceID()
	inc := h.put(t, Record(id, 1), 0)
	if err := h.s.Remove(h.ctx, id, inc); err != nil {
		t.Fatal(err)
	}
	heard := h.heard.all()
	if len(heard) != 1 || heard[0].Incarnation != inc || heard[0].Reason != store.Removed || heard[0].Peer.InstanceID != id {
		t.Fatalf("after Remove returned the hook holds %+v", heard)
	}
}

// testHookRaced has one goroutine remove an entry while another replaces
// it on the same incarnation. Whichever loses, when its call returns the
// hook already holds the removal if the removal won.
func testHookRaced(t *testing.T, h *harness) {
	h.install(t)
	for i := range 50 {
		id := ext.NewInstanceID()
		inc := h.put(t, Record(id, 1), 0)
		var wg sync.WaitGroup
		var putErr error
		var putInc store.Incarnation
		wg.Add(2)
		go func() { defer wg.Done(); _ = h.s.Remove(h.ctx, id, inc) }()
		go func() {
			defer wg.Done()
			putInc, putErr = h.s.Put(h.ctx, store.NewOpID(), Record(id, 2), inc)
			if errors.Is(putErr, store.ErrConflict) && h.heard.count(inc) != 1 {
				t.Errorf("round %d: Put lost to a removal but returned before the hook heard it", i)
			}
		}()
		wg.Wait()
		switch {
		case putErr == nil:
			if h.heard.count(inc) != 0 {
				t.Fatalf("round %d: replaced incarnation %d reported as removed", i, inc)
			}
			if err := h.s.Remove(h.ctx, id, putInc); err != nil {
				t.Fatal(err)
			}
		case !errors.Is(putErr, store.ErrConflict):
			t.Fatalf("round %d: Put: %v", i, putErr)
		}
	}
}

func testHookOnce(t *testing.T, h *harness) {
	if _, err := h.s.InstallRemovalHook(nil); err == nil {
		t.Error("a nil hook was accepted")
	}
	h.install(t)
	if _, err := h.s.InstallRemovalHook(func(store.Removal) {}); !errors.Is(err, store.ErrHookInstalled) {
		t.Errorf("second install: %v, want ErrHookInstalled", err)
	}
	id := ext.NewInstanceID()
	inc := h.put(t, Record(id, 1), 0)
	if err := h.s.Remove(h.ctx, id, inc); err != nil {
		t.Fatal(err)
	}
	if err := h.s.Remove(h.ctx, id, inc); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("second Remove: %v, want ErrNotFound", err)
	}
	if n := h.heard.count(inc); n != 1 {
		t.Errorf("heard %d times", n)
	}
}

func testTTL(t *testing.T, h *harness) {
	r, ok := h.s.(store.Reaper)
	if !ok {
		t.Skip("store does not implement store.Reaper")
	}
	h.install(t)
	idle, alive, pinned := ext.NewInstanceID(), ext.NewInstanceID(), ext.NewInstanceID()
	incIdle := h.put(t, Record(idle, 1), 0)
	incAlive := h.put(t, Record(alive, 1), 0)
	pin := Record(pinned, 1)
	pin.Pinned = true
	h.put(t, pin, 0)

	h.advance(h.ttl / 2)
	if err := h.s.Touch(alive, incAlive); err != nil {
		t.Fatal(err)
	}
	if n, err := r.Reap(h.ctx); err != nil || n != 0 {
		t.Fatalf("reap before the TTL: %d %v", n, err)
	}
	h.advance(h.ttl/2 + time.Second)
	n, err := r.Reap(h.ctx)
	if err != nil || n != 1 {
		t.Fatalf("reap after the TTL: %d %v, want 1", n, err)
	}
	heard := h.heard.all()
	if len(heard) != 1 || heard[0].Incarnation != incIdle || heard[0].Reason != store.Expired {
		t.Fatalf("hook heard %+v", heard)
	}
	if _, ok := h.s.Get(alive); !ok {
		t.Fatal("the touched entry expired")
	}
	if _, ok := h.s.Get(pinned); !ok {
		t.Fatal("the pinned entry expired")
	}
	e, _ := h.s.Get(alive)
	if !e.Touched.Equal(h.clock().Add(-h.ttl/2 - time.Second)) {
		t.Errorf("Touched %v", e.Touched)
	}
}

func testOpID(t *testing.T, h *harness) {
	id := ext.NewInstanceID()
	op1, op2 := store.NewOpID(), store.NewOpID()
	inc1, err := h.s.Put(h.ctx, op1, Record(id, 1), 0)
	if err != nil {
		t.Fatal(err)
	}
	e, ok, err := h.s.ResolveWrite(h.ctx, id, op1)
	if err != nil || !ok || e.Incarnation != inc1 || e.Epoch != 1 {
		t.Fatalf("ResolveWrite of the current write: %+v %v %v", e, ok, err)
	}
	if _, ok, err := h.s.ResolveWrite(h.ctx, id, store.NewOpID()); err != nil || ok {
		t.Fatalf("ResolveWrite of a write never made: %v %v", ok, err)
	}
	if _, err := h.s.Put(h.ctx, op2, Record(id, 2), inc1); err != nil {
		t.Fatal(err)
	}
	if _, ok, _ := h.s.ResolveWrite(h.ctx, id, op1); ok {
		t.Fatal("a replaced write still resolves as current")
	}
	if _, ok, _ := h.s.ResolveWrite(h.ctx, ext.NewInstanceID(), op2); ok {
		t.Fatal("a write resolves under another instance")
	}
	// A write that was never made is final once read back: it cannot
	// apply later under the op id that was read back.
	lost := store.NewOpID()
	other := ext.NewInstanceID()
	if _, ok, err := h.s.ResolveWrite(h.ctx, other, lost); err != nil || ok {
		t.Fatalf("read-back of a lost write: %v %v", ok, err)
	}
	_, err = h.s.Put(h.ctx, lost, Record(other, 1), 0)
	if h.remote && err == nil {
		t.Fatal("a write whose op id was read back applied afterwards")
	}
	if !h.remote && err != nil {
		t.Fatalf("Put: %v", err)
	}
}

func testContinuity(t *testing.T, h *harness) {
	c, ch := h.s.ContinuityWatch()
	if c != store.Live || h.s.Continuity() != store.Live {
		t.Fatalf("new store is %v", c)
	}
	id := ext.NewInstanceID()
	inc := h.put(t, Record(id, 1), 0)
	if err := h.s.Close(h.ctx); err != nil {
		t.Fatal(err)
	}
	select {
	case <-ch:
	case <-time.After(10 * time.Second):
		t.Fatal("continuity watch not told of Close")
	}
	if h.s.Continuity() != store.Closed {
		t.Fatalf("after Close: %v", h.s.Continuity())
	}
	if _, err := h.s.Put(h.ctx, store.NewOpID(), Record(ext.NewInstanceID(), 1), 0); !errors.Is(err, store.ErrClosed) {
		t.Errorf("Put after Close: %v", err)
	}
	if err := h.s.Remove(h.ctx, id, inc); !errors.Is(err, store.ErrClosed) {
		t.Errorf("Remove after Close: %v", err)
	}
	if err := h.s.Close(h.ctx); err != nil {
		t.Errorf("second Close: %v", err)
	}
}

// testConcurrentWriters has writers race conditional replaces of one
// entry: each round exactly one wins, and the incarnations the winners got
// are all different and grow in the order the chain was built.
func testConcurrentWriters(t *testing.T, h *harness) {
	const writers, attempts = 4, 25
	id := ext.NewInstanceID()
	h.put(t, Record(id, 0), 0)
	var mu sync.Mutex
	won := map[store.Incarnation]store.Incarnation{} // new -> the one it replaced
	var wg sync.WaitGroup
	for w := range writers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range attempts {
				cur, ok := h.s.Get(id)
				if !ok {
					t.Error("entry vanished")
					return
				}
				inc, err := h.s.Put(h.ctx, store.NewOpID(), Record(id, uint64(w)), cur.Incarnation)
				switch {
				case err == nil:
					mu.Lock()
					if _, dup := won[inc]; dup {
						t.Errorf("incarnation %d handed out twice", inc)
					}
					won[inc] = cur.Incarnation
					mu.Unlock()
				case !errors.Is(err, store.ErrConflict):
					t.Errorf("Put: %v", err)
					return
				}
			}
		}()
	}
	wg.Wait()
	// The winners form one chain: each replaced a distinct predecessor,
	// and each is above what it replaced.
	preds := map[store.Incarnation]bool{}
	for inc, pred := range won {
		if inc <= pred {
			t.Errorf("incarnation %d replaced %d", inc, pred)
		}
		if preds[pred] {
			t.Errorf("incarnation %d replaced by two writes", pred)
		}
		preds[pred] = true
	}
	if len(won) == 0 {
		t.Fatal("no writer won")
	}
}
