package etcdstore

import (
	"errors"
	"time"

	"github.com/velo-go/velo/ext"
	"github.com/velo-go/velo/hub/store"
	"github.com/velo-go/velo/hub/store/internal/localview"
)

// Get implements store.Store from the local copy.
func (s *Store) Get(id ext.InstanceID) (store.Entry, bool) {
	if it := s.view.Get(id); it != nil {
		return entryOf(it), true
	}
	return store.Entry{}, false
}

// List implements store.Store from the local copy.
func (s *Store) List() []store.Entry {
	out := make([]store.Entry, 0, s.view.Len())
	s.view.Range(func(it *localview.Item[store.Record]) bool { out = append(out, entryOf(it)); return true })
	return out
}

// Peers implements store.Store from the local copy.
func (s *Store) Peers() []store.PeerEntry {
	out := make([]store.PeerEntry, 0, s.view.Len())
	s.view.Range(func(it *localview.Item[store.Record]) bool { out = append(out, peerOf(it)); return true })
	return out
}

// LookupInstance implements store.Store from the local copy.
func (s *Store) LookupInstance(id ext.InstanceID) (store.PeerEntry, bool) {
	if it := s.view.Get(id); it != nil {
		return peerOf(it), true
	}
	return store.PeerEntry{}, false
}

// LookupWorker implements store.Store from the local copy.
func (s *Store) LookupWorker(id ext.WorkerID) (store.PeerEntry, bool) {
	if it := s.view.GetWorker(id); it != nil {
		return peerOf(it), true
	}
	return store.PeerEntry{}, false
}

// InstallRemovalHook implements store.Store and starts the reaper. The
// watch applies events under the same lock, so the snapshot and the hook
// share one revision.
func (s *Store) InstallRemovalHook(hook store.RemovalHook) ([]store.Entry, error) {
	if hook == nil {
		return nil, errors.New("etcdstore: nil removal hook")
	}
	if err := s.usable(); err != nil {
		return nil, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.hook != nil {
		return nil, store.ErrHookInstalled
	}
	s.hook = hook
	snap := s.List()
	s.wg.Add(1)
	go s.reapLoop()
	return snap, nil
}

func entryOf(it *localview.Item[store.Record]) store.Entry {
	return store.Entry{Record: it.Rec.Clone(), Incarnation: store.Incarnation(it.Inc), Touched: time.Unix(0, it.Touched())}
}

func peerOf(it *localview.Item[store.Record]) store.PeerEntry {
	return store.PeerEntry{
		Peer: it.Rec.Peer, Epoch: it.Rec.Epoch, Incarnation: store.Incarnation(it.Inc),
		Pinned: it.Pinned, Touched: time.Unix(0, it.Touched()),
	}
}

func removalOf(it *localview.Item[store.Record], why store.RemovalReason) store.Removal {
	return store.Removal{Peer: it.Rec.Peer, Epoch: it.Rec.Epoch, Incarnation: store.Incarnation(it.Inc), Pinned: it.Pinned, Reason: why}
}
