// Package localview is the sharded in-memory view of a hub store's
// entries: what InMemoryStore keeps as its state and what EtcdStore keeps
// as the copy its watch feeds. Readers take one shard's read lock; the
// store's single writer changes one shard per write, so a write costs the
// same with 100 entries or 10,000, and readers on other shards never wait
// for it.
package localview

import (
	"sync"
	"sync/atomic"

	"github.com/velo-go/velo/ext"
)

const shardCount = 64

// Item is one entry. Everything but touched is fixed once the item is in
// the view; a new write replaces the item.
type Item[R any] struct {
	ID     ext.InstanceID
	Worker ext.WorkerID
	Inc    uint64
	Op     [16]byte
	Pinned bool
	Rec    R
	// touched is unix nanoseconds of the last touch.
	touched atomic.Int64
}

// Touched is the last touch in unix nanoseconds.
func (it *Item[R]) Touched() int64 { return it.touched.Load() }

// Touch records now (unix nanoseconds).
func (it *Item[R]) Touch(now int64) { it.touched.Store(now) }

// NewItem builds an item touched at now.
func NewItem[R any](id ext.InstanceID, inc uint64, op [16]byte, pinned bool, rec R, now int64) *Item[R] {
	it := &Item[R]{ID: id, Worker: id.WorkerID(), Inc: inc, Op: op, Pinned: pinned, Rec: rec}
	it.touched.Store(now)
	return it
}

type shard[R any] struct {
	mu       sync.RWMutex
	byID     map[ext.InstanceID]*Item[R]
	byWorker map[ext.WorkerID]*Item[R]
	_        [40]byte // keep shards' locks on separate cache lines
}

// View is the sharded map. The zero value is not usable; call New.
// Set and Delete must be called by one writer at a time (the store's
// write lock); Get, Lookup and Range may run from any goroutine.
type View[R any] struct {
	shards [shardCount]shard[R]
	n      atomic.Int64
	visits atomic.Int64 // items Range has visited, for tests that count work
}

// Visits is how many items Range has visited so far. A cost test reads it
// around a write to show the write did not scan.
func (v *View[R]) Visits() int64 { return v.visits.Load() }

// New builds an empty view.
func New[R any]() *View[R] {
	v := &View[R]{}
	for i := range v.shards {
		v.shards[i].byID = make(map[ext.InstanceID]*Item[R])
		v.shards[i].byWorker = make(map[ext.WorkerID]*Item[R])
	}
	return v
}

// The shard of an instance is picked by its worker id, so both maps of one
// entry live in one shard.
func (v *View[R]) shardOf(w ext.WorkerID) *shard[R] { return &v.shards[uint64(w)%shardCount] }

// Len is the number of entries.
func (v *View[R]) Len() int { return int(v.n.Load()) }

// Get finds an item by instance id.
func (v *View[R]) Get(id ext.InstanceID) *Item[R] {
	s := v.shardOf(id.WorkerID())
	s.mu.RLock()
	it := s.byID[id]
	s.mu.RUnlock()
	return it
}

// GetWorker finds an item by worker id.
func (v *View[R]) GetWorker(w ext.WorkerID) *Item[R] {
	s := v.shardOf(w)
	s.mu.RLock()
	it := s.byWorker[w]
	s.mu.RUnlock()
	return it
}

// Set puts it in the view, replacing the item of its instance, and answers
// the item it replaced (nil if none).
func (v *View[R]) Set(it *Item[R]) *Item[R] {
	s := v.shardOf(it.Worker)
	s.mu.Lock()
	old := s.byID[it.ID]
	s.byID[it.ID] = it
	s.byWorker[it.Worker] = it
	s.mu.Unlock()
	if old == nil {
		v.n.Add(1)
	}
	return old
}

// Delete removes the item of id and answers it (nil if none).
func (v *View[R]) Delete(id ext.InstanceID) *Item[R] {
	s := v.shardOf(id.WorkerID())
	s.mu.Lock()
	old := s.byID[id]
	if old != nil {
		delete(s.byID, id)
		if s.byWorker[old.Worker] == old {
			delete(s.byWorker, old.Worker)
		}
	}
	s.mu.Unlock()
	if old != nil {
		v.n.Add(-1)
	}
	return old
}

// Range calls f for each item, one shard's read lock at a time, until f
// answers false. A writer may change other shards meanwhile, so Range is
// a consistent snapshot only when the caller holds the store's write lock.
func (v *View[R]) Range(f func(*Item[R]) bool) {
	for i := range v.shards {
		s := &v.shards[i]
		s.mu.RLock()
		v.visits.Add(int64(len(s.byID)))
		for _, it := range s.byID {
			if !f(it) {
				s.mu.RUnlock()
				return
			}
		}
		s.mu.RUnlock()
	}
}
