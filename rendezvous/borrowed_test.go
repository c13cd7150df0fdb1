package rendezvous

import (
	"testing"
	"time"
)

// noOrphans empties the orphan list, which is the process's, for a test
// that counts orphans, and again when it ends.
func noOrphans(t *testing.T) {
	drop := func() {
		borrowed.mu.Lock()
		defer borrowed.mu.Unlock()
		borrowed.n.Add(-int64(len(borrowed.orphans)))
		borrowed.orphans = nil
	}
	drop()
	t.Cleanup(drop)
}

// A payload staged by reference is borrowed while its slot lives, and no
// longer once its receiver released it; any part of it counts.
func TestBorrowedWhileStaged(t *testing.T) {
	s := newStore()
	defer s.close()
	buf := make([]byte, 2<<20)
	id := s.register(buf[1<<20:], 0)
	if !isBorrowed(buf[:10]) || !isBorrowed(buf) {
		t.Fatal("memory of a live slot staged by reference is not borrowed")
	}
	rd, v := s.acquire(id, 0, 7)
	if v != done {
		t.Fatal("acquire refused")
	}
	if v := s.endLease(id, rd.LeaseID, true, 7); v != done {
		t.Fatal("release refused")
	}
	if isBorrowed(buf) {
		t.Fatal("a released slot's memory is still borrowed")
	}
	if owned := s.registerOwned(buf, 0); isBorrowed(buf) {
		t.Fatalf("a slot of a copy (%d) made its memory borrowed", owned)
	}
}

// A slot staged by reference that its TTL freed while a lease was open
// may have chunks queued in a transport for that lease's holder: its
// memory stays borrowed until a Recycle is refused for it, then no
// longer. A slot freed by its holder's release leaves nothing behind.
func TestSlotCutUnderALeaseStaysBorrowed(t *testing.T) {
	noOrphans(t)
	s := newStore()
	defer s.close()
	now := time.Unix(1000, 0)
	s.now = func() time.Time { return now }
	buf := make([]byte, 2<<20)
	n0 := borrowed.n.Load()
	id := s.register(buf, time.Second)
	if _, v := s.acquire(id, 0, 7); v != done {
		t.Fatal("acquire refused")
	}
	now = now.Add(2 * time.Second)
	s.sweepOnce()
	if _, ok := s.metadata(id); ok {
		t.Fatal("the slot outlived its TTL")
	}
	if !isBorrowed(buf) {
		t.Fatal("a slot cut under its lease left its memory unborrowed")
	}
	if isBorrowed(buf) {
		t.Fatal("a refused recycle did not let the orphan go")
	}
	if n := borrowed.n.Load() - n0; n != 0 {
		t.Fatalf("%d entries left listed", n)
	}
}

// Orphans are bounded: the oldest goes.
func TestOrphansAreBounded(t *testing.T) {
	noOrphans(t)
	s := newStore()
	defer s.close()
	now := time.Unix(1000, 0)
	s.now = func() time.Time { return now }
	n0 := borrowed.n.Load()
	for range maxOrphans + 3 {
		id := s.register(make([]byte, 1<<20), time.Second)
		if _, v := s.acquire(id, 0, 7); v != done {
			t.Fatal("acquire refused")
		}
		now = now.Add(2 * time.Second)
		s.sweepOnce()
	}
	if n := borrowed.n.Load() - n0; n != maxOrphans {
		t.Fatalf("%d orphans listed, want %d", n, maxOrphans)
	}
}
