package store

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/velo-go/velo/ext"
	"github.com/velo-go/velo/hub/store/internal/localview"
)

// InMemoryStore keeps registrations in the hub's memory. A write costs
// the same whatever the number of entries: one map update in one of 64
// shards, under the store's write lock. Touches take one shard's read
// lock and one atomic store. Nothing survives the process.
type InMemoryStore struct {
	cfg  memConfig
	view *localview.View[Record]
	cont ContinuitySignal

	mu     sync.Mutex // the write lock: orders writes, removals and hook calls
	last   Incarnation
	hook   RemovalHook
	closed bool

	stop chan struct{}
	done chan struct{} // nil until the reaper starts
}

var _ Store = (*InMemoryStore)(nil)
var _ Reaper = (*InMemoryStore)(nil)

// NewInMemoryStore builds an empty store. Its reaper starts when the
// removal hook is installed.
func NewInMemoryStore(opts ...MemoryOption) (*InMemoryStore, error) {
	cfg := memConfig{ttl: DefaultTTL, now: time.Now}
	for _, o := range opts {
		o.apply(&cfg)
	}
	if cfg.ttl <= 0 || cfg.reapEvery < 0 || cfg.now == nil {
		return nil, errors.New("velo hub store: TTL must be positive, the reap interval not negative, the clock set")
	}
	if cfg.reapEvery == 0 {
		cfg.reapEvery = cfg.ttl / 10
	}
	return &InMemoryStore{cfg: cfg, view: localview.New[Record](), stop: make(chan struct{})}, nil
}

func (s *InMemoryStore) nowNanos() int64 { return s.cfg.now().UnixNano() }

// Put implements Store. It never answers ErrIndeterminate.
func (s *InMemoryStore) Put(_ context.Context, op OpID, rec Record, expect Incarnation) (Incarnation, error) {
	id := rec.Peer.InstanceID
	if id.IsZero() {
		return 0, errors.New("velo hub store: record has no instance id")
	}
	rec = rec.Clone()
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return 0, ErrClosed
	}
	if cur := currentInc(s.view.Get(id)); cur != expect {
		return 0, fmt.Errorf("%w: %s is at %d, not %d", ErrConflict, id, cur, expect)
	}
	s.last++
	s.view.Set(localview.NewItem(id, uint64(s.last), op, rec.Pinned, rec, s.nowNanos()))
	return s.last, nil
}

func currentInc(it *localview.Item[Record]) Incarnation {
	if it == nil {
		return 0
	}
	return Incarnation(it.Inc)
}

// Remove implements Store.
func (s *InMemoryStore) Remove(_ context.Context, id ext.InstanceID, inc Incarnation) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return ErrClosed
	}
	if err := checkInc(s.view.Get(id), id, inc); err != nil {
		return err
	}
	s.removeLocked(id, Removed)
	return nil
}

func checkInc(it *localview.Item[Record], id ext.InstanceID, inc Incarnation) error {
	if it == nil {
		return fmt.Errorf("%w: %s", ErrNotFound, id)
	}
	if Incarnation(it.Inc) != inc {
		return fmt.Errorf("%w: %s is at %d, not %d", ErrConflict, id, it.Inc, inc)
	}
	return nil
}

// removeLocked deletes the entry of id and tells the hook. s.mu is held.
func (s *InMemoryStore) removeLocked(id ext.InstanceID, why RemovalReason) {
	old := s.view.Delete(id)
	if old != nil && s.hook != nil {
		s.hook(removalOf(old, why))
	}
}

// Touch implements Store.
func (s *InMemoryStore) Touch(id ext.InstanceID, inc Incarnation) error {
	it := s.view.Get(id)
	if err := checkInc(it, id, inc); err != nil {
		return err
	}
	it.Touch(s.nowNanos())
	return nil
}

// ResolveWrite implements Store. A memory write is never indeterminate,
// so this only reports whether op produced the current entry.
func (s *InMemoryStore) ResolveWrite(_ context.Context, id ext.InstanceID, op OpID) (Entry, bool, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return Entry{}, false, ErrClosed
	}
	it := s.view.Get(id)
	if it == nil || OpID(it.Op) != op || op.IsZero() {
		return Entry{}, false, nil
	}
	return entryOf(it), true, nil
}

// Get implements Store.
func (s *InMemoryStore) Get(id ext.InstanceID) (Entry, bool) {
	if it := s.view.Get(id); it != nil {
		return entryOf(it), true
	}
	return Entry{}, false
}

// List implements Store.
func (s *InMemoryStore) List() []Entry {
	out := make([]Entry, 0, s.view.Len())
	s.view.Range(func(it *localview.Item[Record]) bool { out = append(out, entryOf(it)); return true })
	return out
}

// Peers implements Store.
func (s *InMemoryStore) Peers() []PeerEntry {
	out := make([]PeerEntry, 0, s.view.Len())
	s.view.Range(func(it *localview.Item[Record]) bool { out = append(out, peerOf(it)); return true })
	return out
}

// LookupInstance implements Store.
func (s *InMemoryStore) LookupInstance(id ext.InstanceID) (PeerEntry, bool) {
	if it := s.view.Get(id); it != nil {
		return peerOf(it), true
	}
	return PeerEntry{}, false
}

// LookupWorker implements Store.
func (s *InMemoryStore) LookupWorker(id ext.WorkerID) (PeerEntry, bool) {
	if it := s.view.GetWorker(id); it != nil {
		return peerOf(it), true
	}
	return PeerEntry{}, false
}

// InstallRemovalHook implements Store, and starts the reaper.
func (s *InMemoryStore) InstallRemovalHook(hook RemovalHook) ([]Entry, error) {
	if hook == nil {
		return nil, errors.New("velo hub store: nil removal hook")
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	switch {
	case s.closed:
		return nil, ErrClosed
	case s.hook != nil:
		return nil, ErrHookInstalled
	}
	s.hook = hook
	snap := make([]Entry, 0, s.view.Len())
	s.view.Range(func(it *localview.Item[Record]) bool { snap = append(snap, entryOf(it)); return true })
	s.done = make(chan struct{})
	go s.reapLoop()
	return snap, nil
}

// Continuity implements Store: Live until Close.
func (s *InMemoryStore) Continuity() Continuity { return s.cont.Load() }

// ContinuityWatch implements Store.
func (s *InMemoryStore) ContinuityWatch() (Continuity, <-chan struct{}) { return s.cont.Watch() }

// Close implements Store: it stops the reaper. Entries stay readable.
func (s *InMemoryStore) Close(ctx context.Context) error {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return nil
	}
	s.closed = true
	close(s.stop)
	done := s.done
	s.mu.Unlock()
	s.cont.Set(Closed)
	if done == nil {
		return nil
	}
	select {
	case <-done:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

func entryOf(it *localview.Item[Record]) Entry {
	return Entry{Record: it.Rec.Clone(), Incarnation: Incarnation(it.Inc), Touched: time.Unix(0, it.Touched())}
}

func peerOf(it *localview.Item[Record]) PeerEntry {
	return PeerEntry{
		Peer: it.Rec.Peer, Epoch: it.Rec.Epoch, Incarnation: Incarnation(it.Inc),
		Pinned: it.Pinned, Touched: time.Unix(0, it.Touched()),
	}
}

func removalOf(it *localview.Item[Record], why RemovalReason) Removal {
	return Removal{Peer: it.Rec.Peer, Epoch: it.Rec.Epoch, Incarnation: Incarnation(it.Inc), Pinned: it.Pinned, Reason: why}
}
