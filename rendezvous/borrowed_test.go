package rendezvous

import (
	"testing"
	"time"
)

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

// takeHeld takes chunks [0, n) of transfer tid as a transport would hold
// them: each with its loan reference, released by the returned func.
func takeHeld(t *testing.T, s *store, tid uint64, n uint32) []func() {
	t.Helper()
	var rel []func()
	for i := range n {
		chunk, loan, v := s.take(tid, i, 7)
		if v != done || loan == nil || len(chunk) == 0 {
			t.Fatalf("take %d: verdict %d, loan %v", i, v, loan)
		}
		rel = append(rel, loan.Release)
	}
	return rel
}

// A receiver that gave up after some chunks were served (they may still
// sit in the owner's transport queue, aliasing the slot's data) detaches,
// and the registrant drops its reference: the memory stays borrowed, for
// every Recycle, until the transport released the last of those chunks.
func TestAbortedTransferStaysBorrowedWhileChunksAreHeld(t *testing.T) {
	s := newStore()
	defer s.close()
	buf := make([]byte, 4*ChunkSize)
	n0 := borrowed.n.Load()
	id := s.register(buf, 0)
	rd, v := s.acquire(id, 0, 7)
	if v != done {
		t.Fatal("acquire refused")
	}
	rel := takeHeld(t, s, rd.TransferID, 4)
	if v := s.endLease(id, rd.LeaseID, false, 7); v != done {
		t.Fatal("detach refused")
	}
	s.unref(id)
	if _, ok := s.metadata(id); ok {
		t.Fatal("the slot outlived its lease and reference")
	}
	for i, release := range rel {
		for range 2 { // a refusal does not let it go
			if !isBorrowed(buf[i*ChunkSize:]) || !isBorrowed(buf[len(buf)-1:]) {
				t.Fatalf("with chunks %d.. held, the freed slot's memory is not borrowed", i)
			}
		}
		release()
	}
	if isBorrowed(buf) {
		t.Fatal("the memory is still borrowed once every chunk was released")
	}
	if n := borrowed.n.Load() - n0; n != 0 {
		t.Fatalf("%d entries left listed", n)
	}
}

// A slot staged by reference that its TTL freed while a lease was open
// and a chunk it served was held stays borrowed until the chunk is
// released; one freed with no chunk held leaves nothing behind.
func TestSlotCutUnderALeaseStaysBorrowed(t *testing.T) {
	s := newStore()
	defer s.close()
	now := time.Unix(1000, 0)
	s.now = func() time.Time { return now }
	buf := make([]byte, 2<<20)
	n0 := borrowed.n.Load()
	id := s.register(buf, time.Second)
	rd, v := s.acquire(id, 0, 7)
	if v != done {
		t.Fatal("acquire refused")
	}
	rel := takeHeld(t, s, rd.TransferID, 1)
	idle := s.register(make([]byte, 1<<20), time.Second)
	if _, v := s.acquire(idle, 0, 7); v != done {
		t.Fatal("acquire refused")
	}
	now = now.Add(2 * time.Second)
	s.sweepOnce()
	if _, ok := s.metadata(id); ok {
		t.Fatal("the slot outlived its TTL")
	}
	if n := borrowed.n.Load() - n0; n != 1 {
		t.Fatalf("%d entries listed, want 1 (the slot whose chunk is held)", n)
	}
	for range 2 { // a refusal does not let it go
		if !isBorrowed(buf) {
			t.Fatal("a slot cut under its lease with a chunk held left its memory unborrowed")
		}
	}
	rel[0]()
	if isBorrowed(buf) {
		t.Fatal("the memory is still borrowed once its chunk was released")
	}
	if n := borrowed.n.Load() - n0; n != 0 {
		t.Fatalf("%d entries left listed", n)
	}
}

// However many freed slots have chunks held, each stays borrowed (no
// count bound pushes one out), and each goes as its chunks are released.
func TestFreedSlotsWithHeldChunksAreNotBounded(t *testing.T) {
	s := newStore()
	defer s.close()
	n0 := borrowed.n.Load()
	var bufs [][]byte
	var rels []func()
	for range 9 {
		buf := make([]byte, 1<<20)
		id := s.register(buf, 0)
		rd, v := s.acquire(id, 0, 7)
		if v != done {
			t.Fatal("acquire refused")
		}
		rels = append(rels, takeHeld(t, s, rd.TransferID, 1)...)
		s.endLease(id, rd.LeaseID, true, 7)
		bufs = append(bufs, buf)
	}
	for i, buf := range bufs {
		if !isBorrowed(buf) {
			t.Fatalf("freed slot %d with a chunk held is not borrowed", i)
		}
	}
	for i, release := range rels {
		release()
		if isBorrowed(bufs[i]) {
			t.Fatalf("freed slot %d is still borrowed once its chunk was released", i)
		}
	}
	if n := borrowed.n.Load() - n0; n != 0 {
		t.Fatalf("%d entries left listed", n)
	}
}

// A chunk served from a slot staged by reference costs its loan's atomic
// add, not an allocation.
func TestTakeOfBorrowedSlotDoesNotAllocate(t *testing.T) {
	s := newStore()
	defer s.close()
	id := s.register(make([]byte, 4*ChunkSize), 0)
	rd, v := s.acquire(id, 0, 7)
	if v != done {
		t.Fatal("acquire refused")
	}
	if n := testing.AllocsPerRun(100, func() {
		_, loan, _ := s.take(rd.TransferID, 1, 7)
		loan.Release()
	}); n != 0 {
		t.Fatalf("take allocates %v times a chunk", n)
	}
	s.endLease(id, rd.LeaseID, true, 7)
}

// Once the store is closed its slots' loans are let go, so it serves no
// more chunks (a chunk would take a reference on a loan gone idle).
func TestClosedStoreServesNoChunk(t *testing.T) {
	s := newStore()
	buf := make([]byte, 2*ChunkSize)
	id := s.register(buf, 0)
	rd, v := s.acquire(id, 0, 7)
	if v != done {
		t.Fatal("acquire refused")
	}
	rel := takeHeld(t, s, rd.TransferID, 1)
	s.close()
	if !isBorrowed(buf) {
		t.Fatal("closing the store let go of memory whose chunk is held")
	}
	if _, loan, v := s.take(rd.TransferID, 1, 7); v != notFound || loan != nil {
		t.Fatalf("a closed store served a chunk (verdict %d)", v)
	}
	rel[0]()
	if isBorrowed(buf) {
		t.Fatal("the memory is still borrowed once its chunk was released")
	}
	s.endLease(id, rd.LeaseID, true, 7)
}
