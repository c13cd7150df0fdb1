package etcdstore_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/velo-go/velo/ext"
	"github.com/velo-go/velo/hub/store"
	"github.com/velo-go/velo/hub/store/etcdstore"
	"github.com/velo-go/velo/hub/store/storetest"
	clientv3 "go.etcd.io/etcd/client/v3"
)

func ctxT(t *testing.T, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

// waitFor waits until the store reports want, on its continuity signal.
func waitFor(t *testing.T, s store.Store, want store.Continuity, within time.Duration) {
	t.Helper()
	deadline := time.After(within)
	for {
		c, ch := s.ContinuityWatch()
		if c == want {
			return
		}
		select {
		case <-ch:
		case <-deadline:
			t.Fatalf("continuity %v, want %v within %v", c, want, within)
		}
	}
}

func TestSecondStoreOnPrefixIsRefusedUntilTheFirstCloses(t *testing.T) {
	cli := client(t, endpoint)
	prefix := freshPrefix()
	a := open(t, cli, etcdstore.WithPrefix(prefix))
	if _, err := etcdstore.New(ctxT(t, 5*time.Second), cli, etcdstore.WithPrefix(prefix)); !errors.Is(err, etcdstore.ErrPrefixHeld) || !errors.Is(err, store.ErrFenced) {
		t.Fatalf("second store: %v, want ErrPrefixHeld", err)
	}
	id := ext.NewInstanceID()
	inc, err := a.Put(ctxT(t, 5*time.Second), store.NewOpID(), storetest.Record(id, 1), 0)
	if err != nil {
		t.Fatal(err)
	}
	waited := make(chan error, 1)
	go func() { waited <- etcdstore.WaitForPrefix(ctxT(t, 10*time.Second), cli, prefix) }()
	if err := a.Close(ctxT(t, 5*time.Second)); err != nil {
		t.Fatal(err)
	}
	if err := <-waited; err != nil {
		t.Fatalf("WaitForPrefix: %v", err)
	}
	// The next hub recovers the entry, on its own custody lease, at a new
	// incarnation.
	b := open(t, cli, etcdstore.WithPrefix(prefix))
	defer b.Close(context.Background())
	e, ok := b.Get(id)
	if !ok || e.Incarnation <= inc || e.Epoch != 1 {
		t.Fatalf("recovered %+v %v (old incarnation %d)", e, ok, inc)
	}
}

func TestLostLockFencesTheStore(t *testing.T) {
	cli := client(t, endpoint)
	prefix := freshPrefix()
	s := open(t, cli, etcdstore.WithPrefix(prefix))
	defer s.Close(context.Background())
	id := ext.NewInstanceID()
	inc, err := s.Put(ctxT(t, 5*time.Second), store.NewOpID(), storetest.Record(id, 1), 0)
	if err != nil {
		t.Fatal(err)
	}
	// Another party deletes the lock, as when its lease expired and a
	// second hub took the prefix.
	if _, err := cli.Delete(ctxT(t, 5*time.Second), prefix+"/lock"); err != nil {
		t.Fatal(err)
	}
	waitFor(t, s, store.Fenced, 5*time.Second)
	if _, err := s.Put(ctxT(t, 5*time.Second), store.NewOpID(), storetest.Record(id, 2), inc); !errors.Is(err, store.ErrFenced) {
		t.Fatalf("Put on a fenced store: %v", err)
	}
	// A second hub can take the prefix; the fenced store cannot write.
	b := open(t, cli, etcdstore.WithPrefix(prefix))
	defer b.Close(context.Background())
	if e, ok := b.Get(id); !ok || e.Epoch != 1 {
		t.Fatalf("second hub sees %+v %v", e, ok)
	}
}

func TestReplacedLockRefusesWrites(t *testing.T) {
	// Another hub holds the lock now (a new lock key): whether the watch
	// or the transaction's own lock check sees it first, the write is
	// refused and the store is Fenced.
	cli := client(t, endpoint)
	prefix := freshPrefix()
	s := open(t, cli, etcdstore.WithPrefix(prefix))
	defer s.Close(context.Background())
	ctx := ctxT(t, 5*time.Second)
	if _, err := cli.Delete(ctx, prefix+"/lock"); err != nil {
		t.Fatal(err)
	}
	if _, err := cli.Put(ctx, prefix+"/lock", "other"); err != nil {
		t.Fatal(err)
	}
	_, err := s.Put(ctx, store.NewOpID(), storetest.Record(ext.NewInstanceID(), 1), 0)
	if !errors.Is(err, store.ErrFenced) {
		t.Fatalf("Put after the lock changed hands: %v", err)
	}
	if s.Continuity() != store.Fenced {
		t.Fatalf("continuity %v", s.Continuity())
	}
}

func TestCutOffIsDegradedThenCompactionIsLostAndReloaded(t *testing.T) {
	px := newProxy(t, endpoint)
	cli := client(t, px.addr)
	direct := client(t, endpoint)
	prefix := freshPrefix()
	s := open(t, cli, etcdstore.WithPrefix(prefix))
	defer s.Close(context.Background())

	var mu sync.Mutex
	var heard []store.Removal
	if _, err := s.InstallRemovalHook(func(r store.Removal) { mu.Lock(); heard = append(heard, r); mu.Unlock() }); err != nil {
		t.Fatal(err)
	}
	ctx := ctxT(t, 20*time.Second)
	keep, gone := ext.NewInstanceID(), ext.NewInstanceID()
	for _, id := range []ext.InstanceID{keep, gone} {
		if _, err := s.Put(ctx, store.NewOpID(), storetest.Record(id, 1), 0); err != nil {
			t.Fatal(err)
		}
	}
	goneInc, _ := s.Get(gone)

	px.cut()
	waitFor(t, s, store.Degraded, 5*time.Second)
	if _, ok := s.LookupInstance(keep); !ok {
		t.Fatal("a degraded store stopped serving lookups")
	}
	// In the gap an entry goes (as if deleted by an operator), and etcd
	// compacts past it, so the watch cannot replay the delete.
	resp, err := direct.Delete(ctx, prefix+"/instances/"+gone.String())
	if err != nil || resp.Deleted != 1 {
		t.Fatalf("delete in the gap: %v %+v", err, resp)
	}
	put, err := direct.Put(ctx, "/velo-hub/unrelated", "x")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := direct.Compact(ctx, put.Header.Revision, clientv3.WithCompactPhysical()); err != nil {
		t.Fatal(err)
	}
	px.resume()
	waitFor(t, s, store.Live, 15*time.Second)
	mu.Lock()
	defer mu.Unlock()
	if len(heard) != 1 || heard[0].Peer.InstanceID != gone || heard[0].Incarnation != goneInc.Incarnation || heard[0].Reason != store.Vanished {
		t.Fatalf("after the reload the hook heard %+v", heard)
	}
	if _, ok := s.Get(gone); ok {
		t.Fatal("the entry that went in the gap is still in the copy")
	}
	if _, ok := s.Get(keep); !ok {
		t.Fatal("the kept entry was lost")
	}
}

func TestLostAnswerIsSettledByReadBack(t *testing.T) {
	px := newProxy(t, endpoint)
	cli := client(t, px.addr)
	prefix := freshPrefix()
	s := open(t, cli, etcdstore.WithPrefix(prefix))
	defer s.Close(context.Background())
	id := ext.NewInstanceID()

	px.cut()
	op := store.NewOpID()
	short, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	_, err := s.Put(short, op, storetest.Record(id, 1), 0)
	cancel()
	if !errors.Is(err, store.ErrIndeterminate) {
		t.Fatalf("Put with no answer: %v, want ErrIndeterminate", err)
	}
	px.resume()
	ctx := ctxT(t, 15*time.Second)
	_, ok, err := s.ResolveWrite(ctx, id, op)
	if err != nil || ok {
		t.Fatalf("read-back: %v %v, want not applied", ok, err)
	}
	// The read-back is final: the same write, retried by a client library
	// or delayed in flight, is refused.
	if _, err := s.Put(ctx, op, storetest.Record(id, 1), 0); !errors.Is(err, etcdstore.ErrOpReadBack) {
		t.Fatalf("write after its read-back: %v, want ErrOpReadBack", err)
	}
	// A write whose answer is lost after it applied resolves as current.
	op2 := store.NewOpID()
	inc, err := s.Put(ctx, op2, storetest.Record(id, 2), 0)
	if err != nil {
		t.Fatal(err)
	}
	e, ok, err := s.ResolveWrite(ctx, id, op2)
	if err != nil || !ok || e.Incarnation != inc || e.Epoch != 2 {
		t.Fatalf("read-back of an applied write: %+v %v %v", e, ok, err)
	}
}
