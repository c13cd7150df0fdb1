package rendezvous

import (
	"math/bits"
	"testing"

	"github.com/velo-go/velo/ext"
)

// TestIDsAreUnguessable: slot, lease and transfer ids are random 64-bit
// values, never 0 and never repeated. With the one counter they came from
// before, each id was the last one plus one, a lease and its transfer had
// the same id, and a stranger read another request's payload at its
// first guess (handle lo = 1).
func TestIDsAreUnguessable(t *testing.T) {
	s := newStore()
	const n = 2000
	var slots, leases, transfers []uint64
	for range n {
		slots = append(slots, s.register([]byte("x"), 0))
	}
	for range n {
		rd, v := s.acquire(slots[0], 0, 7)
		if v != done {
			t.Fatal("acquire refused")
		}
		if rd.LeaseID == rd.TransferID {
			t.Fatalf("lease and transfer share id %d", rd.LeaseID)
		}
		leases = append(leases, rd.LeaseID)
		transfers = append(transfers, rd.TransferID)
	}
	for kind, ids := range map[string][]uint64{"slot": slots, "lease": leases, "transfer": transfers} {
		seen := map[uint64]bool{}
		var ones [64]int
		follows := 0
		for i, id := range ids {
			if id == 0 || seen[id] {
				t.Fatalf("%s id %d: zero or repeated", kind, id)
			}
			seen[id] = true
			if i > 0 && id == ids[i-1]+1 {
				follows++
			}
			for b := range 64 {
				ones[b] += int(id >> b & 1)
			}
		}
		if follows > 0 {
			t.Errorf("%s ids: %d of %d follow the previous one", kind, follows, n-1)
		}
		// Each bit is set in about half the ids (1,000 ± 22 for one
		// standard deviation); a counter leaves the high bits at 0.
		for b, c := range ones {
			if c < n*3/10 || c > n*7/10 {
				t.Errorf("%s ids: bit %d set in %d of %d", kind, b, c, n)
				break
			}
		}
	}
	if l := bits.Len64(slots[0] | slots[1] | slots[2]); l < 60 {
		t.Errorf("three slot ids use %d bits", l)
	}
}

// TestIDCollisionDrawsAgain: a drawn 0 or an id in use is drawn again.
func TestIDCollisionDrawsAgain(t *testing.T) {
	s := newStore()
	script := []uint64{0, 5, 5, 0, 7, 5, 5, 5, 9, 5, 11}
	s.draw = func() uint64 {
		v := script[0]
		script = script[1:]
		return v
	}
	if id := s.register(nil, 0); id != 5 {
		t.Fatalf("first slot %d, want 5 (0 skipped)", id)
	}
	if id := s.register(nil, 0); id != 7 {
		t.Fatalf("second slot %d, want 7 (5 taken, 0 skipped)", id)
	}
	// Lease and transfer ids live in maps of their own: 5 is free in both.
	rd, _ := s.acquire(5, 0, 1)
	if rd.LeaseID != 5 || rd.TransferID != 5 {
		t.Fatalf("first lease %d transfer %d, want 5 and 5", rd.LeaseID, rd.TransferID)
	}
	rd, _ = s.acquire(5, 0, 1)
	if rd.LeaseID != 9 || rd.TransferID != 11 {
		t.Fatalf("second lease %d transfer %d, want 9 and 11", rd.LeaseID, rd.TransferID)
	}
	if len(script) != 0 {
		t.Fatalf("%d draws left over", len(script))
	}
}

// TestLeaseBelongsToItsHolder: a pull, renewal or end of a lease by any
// peer but its holder is refused and changes nothing; a lease named with
// another slot's handle is refused too.
func TestLeaseBelongsToItsHolder(t *testing.T) {
	const a, b ext.WorkerID = 11, 22
	s := newStore()
	id := s.register(make([]byte, ChunkSize+1), 0)
	other := s.register([]byte("y"), 0)
	rd, _ := s.acquire(id, 0, a)
	if _, v := s.chunk(rd.TransferID, 0, b); v != notHolder {
		t.Fatalf("pull by a stranger: %d", v)
	}
	if v := s.renew(id, rd.LeaseID, b); v != notHolder {
		t.Fatalf("renew by a stranger: %d", v)
	}
	for _, deref := range []bool{false, true} {
		if v := s.endLease(id, rd.LeaseID, deref, b); v != notHolder {
			t.Fatalf("end (deref %v) by a stranger: %d", deref, v)
		}
	}
	if v := s.endLease(other, rd.LeaseID, true, a); v != mismatch {
		t.Fatalf("end naming another slot: %d", v)
	}
	if md, _ := s.metadata(id); md.Refcount != 1 {
		t.Fatalf("refcount %d after refused releases", md.Refcount)
	}
	if c, v := s.chunk(rd.TransferID, 1, a); v != done || len(c) != 1 {
		t.Fatalf("pull by the holder: %d bytes, %d", len(c), v)
	}
	if v := s.endLease(id, rd.LeaseID, true, a); v != done {
		t.Fatalf("release by the holder: %d", v)
	}
	if _, ok := s.metadata(id); ok {
		t.Fatal("the slot outlived its last reference and lease")
	}
}

// FuzzOwnerRequests feeds decoded request bodies, from any asker, to the
// store the owner's handlers use. Whatever the bytes, nothing panics, and
// the lease of worker 1 survives every request that is not worker 1's own
// detach or release of it. The ids here come from a counter (slot 1,
// lease 2, transfer 3), so that the fuzzer can name them.
func FuzzOwnerRequests(f *testing.F) {
	for _, s := range []string{
		`{"transfer_id":3,"chunk_index":0}`, `{"handle":{"hi":1,"lo":1},"lease_id":2}`, `{"handle":{"hi":1,"lo":2},"lease_id":2}`,
		`{"transfer_id":18446744073709551615,"chunk_index":4294967295}`, `{"handle":{"hi":0,"lo":0},"lease_id":0}`, `{`,
	} {
		for op := range uint8(3) {
			f.Add([]byte(s), uint64(1), op)
			f.Add([]byte(s), uint64(2), op)
		}
	}
	f.Fuzz(func(t *testing.T, body []byte, asker uint64, op uint8) {
		s := newStore()
		defer s.close()
		var next uint64
		s.draw = func() uint64 { next++; return next }
		id := s.register([]byte("abc"), 0)
		rd, _ := s.acquire(id, 0, 1)
		who := ext.WorkerID(asker)
		var pr pullRequest
		var lr leaseRequest
		ended := false
		switch op % 3 {
		case 0:
			if decode(body, &pr) == nil {
				if b, v := s.chunk(pr.TransferID, pr.ChunkIndex, who); v == done && (who != 1 || pr.TransferID != rd.TransferID || len(b) == 0) {
					t.Fatalf("pull %+v by %d served %d bytes", pr, who, len(b))
				}
			}
		case 1:
			if decode(body, &lr) == nil {
				s.renew(lr.Handle.Lo, lr.LeaseID, who)
			}
		case 2:
			if decode(body, &lr) == nil {
				v := s.endLease(lr.Handle.Lo, lr.LeaseID, op%2 == 0, who)
				ended = v == done
				if ended && (who != 1 || lr.LeaseID != rd.LeaseID || lr.Handle.Lo != id) {
					t.Fatalf("end %+v by %d was done", lr, who)
				}
			}
		}
		if _, ok := s.leases[rd.LeaseID]; ok == ended {
			t.Fatalf("lease present %v after a request that ended it: %v", ok, ended)
		}
	})
}

// TestLeasesPerPeerAreBounded: a handle is a capability, but one peer
// cannot keep more than MaxLeasesPerPeer leases open (each keeps its slot
// staged); another peer is not affected, and an ended lease frees a place.
func TestLeasesPerPeerAreBounded(t *testing.T) {
	s := newStore()
	id := s.register([]byte("x"), 0)
	var last ready
	for i := range MaxLeasesPerPeer {
		rd, v := s.acquire(id, 0, 1)
		if v != done {
			t.Fatalf("lease %d refused: %d", i, v)
		}
		last = rd
	}
	if _, v := s.acquire(id, 0, 1); v != tooManyLeases {
		t.Fatalf("lease past the bound: verdict %d, want tooManyLeases", v)
	}
	if _, v := s.acquire(id, 0, 2); v != done {
		t.Fatalf("another peer's lease: verdict %d", v)
	}
	if v := s.endLease(id, last.LeaseID, false, 1); v != done {
		t.Fatalf("end lease: %d", v)
	}
	if _, v := s.acquire(id, 0, 1); v != done {
		t.Fatalf("a lease after one ended: verdict %d", v)
	}
}

// TestLostHolderLeasesEnd: the leases of a peer whose node is gone end at
// once (no release will come, and Get asks for no deadline), freeing its
// place under the bound and its slot's read locks; this node's own local
// leases are not bounded per peer.
func TestLostHolderLeasesEnd(t *testing.T) {
	s := newStore()
	s.self = 9
	id := s.register([]byte("x"), 0)
	for range MaxLeasesPerPeer + 1 {
		if _, v := s.acquire(id, 0, 9); v != done {
			t.Fatalf("a local lease was refused: %d", v)
		}
	}
	for range MaxLeasesPerPeer {
		if _, v := s.acquire(id, 0, 1); v != done {
			t.Fatalf("lease refused: %d", v)
		}
	}
	if n := s.dropHolder(1); n != MaxLeasesPerPeer {
		t.Fatalf("dropHolder ended %d leases, want %d", n, MaxLeasesPerPeer)
	}
	if _, v := s.acquire(id, 0, 1); v != done {
		t.Fatalf("a lease after the holder's were dropped: verdict %d", v)
	}
	s.mu.Lock()
	locks := s.slots[id].readLocks
	s.mu.Unlock()
	if locks != MaxLeasesPerPeer+2 {
		t.Fatalf("read locks %d, want %d (the local leases and the new one)", locks, MaxLeasesPerPeer+2)
	}
}

// TestLeasesInAllAreBounded: peers that name ever new worker ids (one that
// cannot prove its identity may) are bounded together too.
func TestLeasesInAllAreBounded(t *testing.T) {
	s := newStore()
	id := s.register([]byte("x"), 0)
	for i := range MaxLeases {
		if _, v := s.acquire(id, 0, ext.WorkerID(100+i/MaxLeasesPerPeer)); v != done {
			t.Fatalf("lease %d refused: %d", i, v)
		}
	}
	if _, v := s.acquire(id, 0, 99999); v != tooManyLeases {
		t.Fatalf("a lease past the total bound from a new worker: verdict %d, want tooManyLeases", v)
	}
}
