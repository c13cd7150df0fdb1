package hub

import (
	"runtime"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/velo-go/velo/ext"
	"github.com/velo-go/velo/hub/protocol"
	"github.com/velo-go/velo/hub/store"
)

// The request-path reads, as the book measures them: authorize and the
// peer lookup by instance id, with 10,000 owners, at 1 and 8 goroutines,
// against the design the book rejected (every reader on one RWMutex), in
// the same run. Run:
//
//	go test -run '^$' -bench 'Authorize|Lookup' -benchtime 2000000x ./hub/
//
// ns/op at 8 goroutines is wall time per call over all goroutines, so a
// read that scales shows a smaller figure than at 1.

const costOwners = 10_000

type costOwner struct {
	id   ext.InstanceID
	cred protocol.Credential
}

func costSetup(b *testing.B) (*Authority, *rwAuthority, []costOwner) {
	b.Helper()
	st, err := store.NewInMemoryStore()
	if err != nil {
		b.Fatal(err)
	}
	a := newAuthority(st)
	rw := &rwAuthority{m: map[ext.InstanceID]*grant{}}
	owners := make([]costOwner, costOwners)
	for i := range owners {
		o := costOwner{id: ext.NewInstanceID(), cred: protocol.NewCredential()}
		g := &grant{kind: grantLive, lease: Lease{Incarnation: store.Incarnation(i + 1), Epoch: 1}, cred: credOf(o.cred)}
		a.put(o.id, g)
		rw.m[o.id] = g
		owners[i] = o
	}
	return a, rw, owners
}

// rwAuthority is the rejected design: one map under one RWMutex that
// every reader takes.
type rwAuthority struct {
	mu sync.RWMutex
	m  map[ext.InstanceID]*grant
}

func (r *rwAuthority) Authorize(owner ext.InstanceID, c protocol.Credential) (Lease, error) {
	r.mu.RLock()
	defer r.mu.RUnlock()
	g := r.m[owner]
	if g == nil {
		return Lease{}, errNoInstance
	}
	if !sameCredential(g, c) {
		return Lease{}, errUnauthorized
	}
	return g.lease, nil
}

func runReads(b *testing.B, goroutines int, owners []costOwner, read func(costOwner) bool) {
	b.ReportAllocs()
	if goroutines == 1 {
		for i := 0; b.Loop(); i++ {
			if !read(owners[i%len(owners)]) {
				b.Fatal("read failed")
			}
		}
		return
	}
	b.SetParallelism((goroutines + runtime.GOMAXPROCS(0) - 1) / runtime.GOMAXPROCS(0))
	var next atomic.Uint64
	b.RunParallel(func(pb *testing.PB) {
		i := int(next.Add(7919))
		for pb.Next() {
			i++
			if !read(owners[i%len(owners)]) {
				b.Error("read failed")
				return
			}
		}
	})
}

func BenchmarkAuthorize(b *testing.B) {
	a, rw, owners := costSetup(b)
	for _, g := range []int{1, 8} {
		b.Run("sharded/goroutines="+itoa(g), func(b *testing.B) {
			runReads(b, g, owners, func(o costOwner) bool { _, err := a.Authorize(o.id, o.cred); return err == nil })
		})
		b.Run("one-rwmutex/goroutines="+itoa(g), func(b *testing.B) {
			runReads(b, g, owners, func(o costOwner) bool { _, err := rw.Authorize(o.id, o.cred); return err == nil })
		})
	}
}

func BenchmarkLookupInstance(b *testing.B) {
	st, err := store.NewInMemoryStore()
	if err != nil {
		b.Fatal(err)
	}
	_, _, owners := costSetup(b)
	var mu sync.RWMutex
	rw := map[ext.InstanceID]ext.PeerInfo{}
	for _, o := range owners {
		p := ext.PeerInfo{InstanceID: o.id, Address: ext.WorkerAddress{"tcp": []byte("127.0.0.1:1")}}
		if _, err := st.Put(b.Context(), store.NewOpID(), store.Record{Peer: p, Epoch: 1}, 0); err != nil {
			b.Fatal(err)
		}
		rw[o.id] = p
	}
	for _, g := range []int{1, 8} {
		b.Run("store/goroutines="+itoa(g), func(b *testing.B) {
			runReads(b, g, owners, func(o costOwner) bool { _, ok := st.LookupInstance(o.id); return ok })
		})
		b.Run("one-rwmutex/goroutines="+itoa(g), func(b *testing.B) {
			runReads(b, g, owners, func(o costOwner) bool {
				mu.RLock()
				_, ok := rw[o.id]
				mu.RUnlock()
				return ok
			})
		})
	}
}

func itoa(n int) string {
	if n < 10 {
		return string(rune('0' + n))
	}
	return itoa(n/10) + itoa(n%10)
}
