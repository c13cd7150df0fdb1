package store

import (
	"sync"
	"sync/atomic"
)

// Continuity says whether a store's view is whole and its own.
type Continuity uint32

const (
	// Live: the view is current and the store is the prefix's only
	// writer.
	Live Continuity = iota
	// Degraded: the store is cut off from its backend. Reads serve a view
	// that may be stale; the hub refuses credentials.
	Degraded
	// Lost: the store lost history and is reloading; it is Live again
	// after it reported every entry that went away in the gap.
	Lost
	// Fenced: another hub holds the store. It stays Fenced until Close.
	Fenced
	// Closed: Close was called. Final.
	Closed
)

func (c Continuity) String() string {
	switch c {
	case Live:
		return "live"
	case Degraded:
		return "degraded"
	case Lost:
		return "lost"
	case Fenced:
		return "fenced"
	case Closed:
		return "closed"
	}
	return "unknown"
}

// ContinuitySignal holds a continuity that readers load with one atomic
// load and watchers wait on. Store backends embed one. Fenced can only
// turn into Closed, and Closed into nothing. The zero value is Live.
type ContinuitySignal struct {
	cur atomic.Uint32
	mu  sync.Mutex
	ch  chan struct{} // closed at the next change; nil until watched
}

// Load is the current continuity.
func (s *ContinuitySignal) Load() Continuity { return Continuity(s.cur.Load()) }

// Watch answers the current continuity and a channel closed at its next
// change.
func (s *ContinuitySignal) Watch() (Continuity, <-chan struct{}) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.ch == nil {
		s.ch = make(chan struct{})
	}
	return s.Load(), s.ch
}

// Set changes the continuity to c and reports whether it changed. A
// change out of Fenced (except to Closed) or out of Closed is refused.
func (s *ContinuitySignal) Set(c Continuity) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	old := s.Load()
	if old == c || old == Closed || old == Fenced && c != Closed {
		return false
	}
	s.cur.Store(uint32(c))
	if s.ch != nil {
		close(s.ch)
		s.ch = nil
	}
	return true
}
