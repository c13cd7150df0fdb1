package rendezvous

import (
	crand "crypto/rand"
	"math/rand/v2"
	"sync"
	"time"

	"github.com/velo-go/velo/ext"
	"github.com/velo-go/velo/internal/msgrx"
)

// ChunkSize is the size of one _rv_pull answer (the last one may be shorter).
const ChunkSize = 512 << 10

// sweepEvery is how often the sweep looks for slots and leases past their deadline.
const sweepEvery = 100 * time.Millisecond

// slot is one staged payload on its owner.
type slot struct {
	data      []byte
	size      int // bytes staged: len(data), or the staging's
	refcount  uint32
	readLocks uint32
	expires   time.Time   // zero: no time-to-live
	loan      *msgrx.Loan // data is the caller's (register, registerLent): counts the chunks served from it still held; nil when the store owns it
	borrowed  bool        // listed in borrowed, holding a reference on loan
	lent      bool        // loan is its lender's (registerLent), whose withdraw waits until it is idle
	pinned                // registered memory instead of data (store_pinned.go)
}

// lease is one consumer's read lock on a slot, with the one transfer its
// acquire opened. The lease and the transfer belong to holder, the peer
// whose _rv_acquire opened them: only it may pull, renew or end them.
type lease struct {
	local      uint64
	transferID uint64
	holder     ext.WorkerID
	chunkSize  uint32
	chunkCount uint32
	timeout    time.Duration // 0: no deadline
	deadline   time.Time
	rdma       bool // answered with a descriptor: its deadline is the reaper's, not the sweep's
}

// store holds the owner's staged slots and the leases on them. One mutex:
// every operation under it is a few map operations, and chunk bytes are
// copied out by the transport, not under the lock.
//
// Slot, lease and transfer ids are random 64-bit values, never 0: a peer
// names a slot, a lease or a transfer only with an id the owner gave out,
// so an id must not be guessable from another one (a counter handed a
// stranger another request's payload at its first guess).
type store struct {
	mu        sync.Mutex
	slots     map[uint64]*slot
	leases    map[uint64]*lease    // by lease id
	byHolder  map[ext.WorkerID]int // leases open per holder: at most MaxLeasesPerPeer
	self      ext.WorkerID         // this node: its own leases (local Gets) are not bounded per peer
	transfers map[uint64]uint64    // transfer id → lease id
	draw      func() uint64        // the id source: rng, or a test's
	rng       *rand.ChaCha8        // a CSPRNG seeded from crypto/rand; used under mu
	held      int64                // bytes in slots
	deadlines int                  // slots with a TTL plus chunked leases with a deadline
	rdmaLive  int                  // RDMA leases: each has a deadline, the reaper's

	// The sweep goroutine runs only while deadlines > 0, the reaper only
	// while rdmaLive > 0 (store_timers.go).
	sweeping  bool
	reaping   bool
	reapEvery time.Duration
	closed    bool
	stop      chan struct{}
	wg        sync.WaitGroup
	onExpire  func(n int) // metrics: slots and leases the sweep ended
	onReap    func(n int) // metrics: RDMA leases the reaper ended
	onCount   func(slots int)
	now       func() time.Time

	// Stagings let go under mu, released by unlock once mu is free:
	// giving registered memory back may take the registry's own locks.
	pending []stagingMem
	// retiredBusy counts stagings let go while a copy out of them ran;
	// idle (L is &mu) is signalled as each is released.
	retiredBusy int
	idle        sync.Cond
}

func newStore() *store {
	var seed [32]byte
	crand.Read(seed[:]) // never fails (crypto/rand, Go 1.24 and later)
	s := &store{
		slots: map[uint64]*slot{}, leases: map[uint64]*lease{}, transfers: map[uint64]uint64{}, byHolder: map[ext.WorkerID]int{},
		rng: rand.NewChaCha8(seed), stop: make(chan struct{}), now: time.Now, reapEvery: sweepEvery,
	}
	s.draw = s.rng.Uint64
	s.idle.L = &s.mu
	return s
}

// unlock releases mu, then the stagings let go under it.
func (s *store) unlock() {
	rel := s.pending
	s.pending = nil
	s.mu.Unlock()
	for _, st := range rel {
		st.Release()
	}
}

// newIDLocked draws an id that is not 0 (0 names nothing on the wire) and
// that taken does not report in use; a collision draws again.
func (s *store) newIDLocked(taken func(uint64) bool) uint64 {
	for {
		if id := s.draw(); id != 0 && !taken(id) {
			return id
		}
	}
}

func (s *store) slotTaken(id uint64) bool     { _, ok := s.slots[id]; return ok }
func (s *store) leaseTaken(id uint64) bool    { _, ok := s.leases[id]; return ok }
func (s *store) transferTaken(id uint64) bool { _, ok := s.transfers[id]; return ok }

// register stages data (kept, not copied) with refcount 1.
func (s *store) register(data []byte, ttl time.Duration) uint64 {
	sl := &slot{data: data, size: len(data)}
	borrow(sl)
	return s.add(sl, ttl)
}

// registerOwned is register for data that the store's caller made for it
// (a copy): no one else holds it.
func (s *store) registerOwned(data []byte, ttl time.Duration) uint64 {
	return s.add(&slot{data: data, size: len(data)}, ttl)
}

// registerLent stages the caller's data itself, with refcount 1, until
// withdraw. Its loan counts the chunks served from it that the transport
// still holds, as their ext.Owner (msgrx.Loan); a chunk is only taken
// while the slot is staged, so while the lender's reference is held.
func (s *store) registerLent(data []byte, ttl time.Duration) (uint64, *msgrx.Loan) {
	l := msgrx.NewLoan()
	sl := &slot{data: data, size: len(data), loan: l, lent: true}
	borrow(sl)
	return s.add(sl, ttl), l
}

// add stages sl with refcount 1.
func (s *store) add(sl *slot, ttl time.Duration) uint64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	id := s.newIDLocked(s.slotTaken)
	sl.refcount = 1
	if ttl > 0 {
		sl.expires = s.now().Add(ttl)
		s.addDeadlineLocked()
	}
	s.slots[id] = sl
	s.held += int64(sl.size)
	s.countLocked()
	return id
}

// withdraw frees the lent slot id of loan l now, whatever still holds it,
// with every lease on it: a later acquire or pull is refused as not
// found. A slot its receiver released, or its TTL freed, is gone already;
// an id drawn again since names another slot, which stays.
func (s *store) withdraw(id uint64, l *msgrx.Loan) {
	s.mu.Lock()
	defer s.unlock()
	sl, ok := s.slots[id]
	if !ok || sl.loan != l {
		return
	}
	if sl.readLocks > 0 { // the receiver had not finished: rare, so a scan
		for lid, ls := range s.leases {
			if ls.local == id {
				s.dropLeaseLocked(lid, ls)
			}
		}
	}
	s.freeLocked(id, sl)
}

func (s *store) countLocked() {
	if s.onCount != nil {
		s.onCount(len(s.slots))
	}
}

func (s *store) metadata(id uint64) (Metadata, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	sl, ok := s.slots[id]
	if !ok {
		return Metadata{}, false
	}
	return Metadata{TotalLen: uint64(sl.size), Refcount: sl.refcount, Pinned: sl.staging != nil}, true
}

// acquire takes a read lock for holder and opens the chunked transfer.
// The registration is checked here, at every acquire.
func (s *store) acquire(id uint64, timeout time.Duration, holder ext.WorkerID) (ready, verdict) {
	rd, _, v := s.acquireSlot(id, timeout, holder, false)
	return rd, v
}

// acquireSlot is acquire that, with pin set, also returns the slot's
// staging held against release (see pin), or nil for a slot in plain
// memory; the caller ends a hold it got with unpin.
func (s *store) acquireSlot(id uint64, timeout time.Duration, holder ext.WorkerID, pin bool) (ready, *pinHold, verdict) {
	s.mu.Lock()
	defer s.mu.Unlock()
	sl, ok := s.slots[id]
	if !ok {
		return ready{}, nil, notFound
	}
	if holder != s.self && (s.byHolder[holder] >= MaxLeasesPerPeer || len(s.leases) >= MaxLeases) {
		// A handle is a capability, but what its holder may keep open on
		// this node is bounded: each lease keeps its slot staged.
		return ready{}, nil, tooManyLeases
	}
	s.byHolder[holder]++
	sl.readLocks++
	lid := s.newIDLocked(s.leaseTaken)
	tid := s.newIDLocked(s.transferTaken)
	n := uint64(sl.size)
	l := &lease{local: id, transferID: tid, holder: holder, chunkSize: ChunkSize, chunkCount: uint32((n + ChunkSize - 1) / ChunkSize)}
	if timeout > 0 {
		l.timeout, l.deadline = timeout, s.now().Add(timeout)
		s.addDeadlineLocked()
	}
	s.leases[lid] = l
	s.transfers[tid] = lid
	var hold *pinHold
	if pin {
		hold = s.pinLocked(sl)
	}
	return ready{LeaseID: lid, TransferID: tid, TotalLen: n, ChunkSize: l.chunkSize, ChunkCount: l.chunkCount}, hold, done
}

// verdict is what the store made of a request that names a lease or a
// transfer: done, or why it was refused.
type verdict uint8

const (
	done          verdict = iota
	notFound              // no such slot, lease or transfer, or a chunk past the end
	notHolder             // the lease or transfer was handed to another peer
	mismatch              // the lease is on another slot than the handle names
	tooManyLeases         // the asker holds MaxLeasesPerPeer leases already
)

// MaxLeasesPerPeer bounds the leases one peer may hold open on this node
// at once (each keeps its slot staged until it ends or expires), and
// MaxLeases those of all peers: a peer that cannot prove its identity
// (see the messenger's identity gate) could name ever new worker ids.
const (
	MaxLeasesPerPeer = 4096
	MaxLeases        = 1 << 16
)

// take returns chunk idx of a transfer (aliasing the slot: slots are never
// written while staged) and renews the lease's deadline. Only the lease's
// holder may pull. For a slot of its caller's memory (register,
// registerLent) it also returns the slot's loan with one reference taken
// for the caller, who releases it once nothing reads the chunk any more
// (the transport, as the chunk frame's Owner); nil otherwise.
func (s *store) take(transferID uint64, idx uint32, asker ext.WorkerID) ([]byte, *msgrx.Loan, verdict) {
	s.mu.Lock()
	b, lent, hold, v := s.takeLocked(transferID, idx, asker)
	s.mu.Unlock()
	if hold != nil {
		// A pinned slot: its chunk is copied out of registered memory,
		// with the store unlocked, while the hold keeps the staging.
		b, v = s.readPinned(hold, b)
	}
	return b, lent, v
}

// takeLocked finds chunk idx. For a pinned slot it returns a hold on the
// staging and, in place of the bytes, a buffer of the chunk's length at
// the chunk's offset within the staging's capacity (see readPinned).
func (s *store) takeLocked(transferID uint64, idx uint32, asker ext.WorkerID) ([]byte, *msgrx.Loan, *pinHold, verdict) {
	lid, ok := s.transfers[transferID]
	if !ok || s.closed { // close let the loans go: nothing may be served from a slot since
		return nil, nil, nil, notFound
	}
	l := s.leases[lid]
	if l.holder != asker {
		return nil, nil, nil, notHolder
	}
	sl := s.slots[l.local]
	if sl == nil || idx >= l.chunkCount {
		return nil, nil, nil, notFound
	}
	if l.timeout > 0 {
		l.deadline = s.now().Add(l.timeout)
	}
	off := uint64(idx) * uint64(l.chunkSize)
	end := min(off+uint64(l.chunkSize), uint64(sl.size))
	if sl.staging != nil {
		return make([]byte, end-off), nil, s.pinLockedAt(sl, int64(off)), done
	}
	if sl.loan != nil {
		sl.loan.Retain() // the store's reference is held: the slot is staged
	}
	return sl.data[off:end:end], sl.loan, nil, done
}

// leaseLocked finds lease lid on slot id for asker.
func (s *store) leaseLocked(id, lid uint64, asker ext.WorkerID) (*lease, verdict) {
	l, ok := s.leases[lid]
	switch {
	case !ok:
		return nil, notFound
	case l.holder != asker:
		return nil, notHolder
	case l.local != id:
		return nil, mismatch
	}
	return l, done
}

// renew pushes a lease's deadline out, for its holder only.
func (s *store) renew(id, lid uint64, asker ext.WorkerID) verdict {
	s.mu.Lock()
	defer s.mu.Unlock()
	l, v := s.leaseLocked(id, lid, asker)
	if v == done && l.timeout > 0 {
		l.deadline = s.now().Add(l.timeout)
	}
	return v
}

// ref adds one reference.
func (s *store) ref(id uint64) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	sl, ok := s.slots[id]
	if ok {
		sl.refcount++
	}
	return ok
}

// endLease drops a lease (a detach), and one reference too when deref is
// set (a release). The slot is freed when both counts reach zero. Only the
// lease's holder may end it, naming the slot it is on; a refused request
// changes nothing, so it cannot strand the slot it names or another.
func (s *store) endLease(id, lid uint64, deref bool, asker ext.WorkerID) verdict {
	s.mu.Lock()
	defer s.unlock()
	l, v := s.leaseLocked(id, lid, asker)
	if v != done {
		return v
	}
	s.dropLeaseLocked(lid, l)
	if sl := s.slots[id]; sl != nil {
		if sl.readLocks > 0 {
			sl.readLocks--
		}
		if deref && sl.refcount > 0 {
			sl.refcount--
		}
		s.maybeFreeLocked(id, sl)
	}
	return done
}

// unref drops one reference with no lease (the sender's Discard).
func (s *store) unref(id uint64) bool {
	s.mu.Lock()
	defer s.unlock()
	sl, ok := s.slots[id]
	if !ok {
		return false
	}
	if sl.refcount > 0 {
		sl.refcount--
	}
	s.maybeFreeLocked(id, sl)
	return true
}

// releaseLeaseLocked ends lease lid without a deref: its slot loses the
// read lock the lease held, and goes if nothing else keeps it.
func (s *store) releaseLeaseLocked(lid uint64, l *lease) {
	s.dropLeaseLocked(lid, l)
	if sl := s.slots[l.local]; sl != nil {
		if sl.readLocks > 0 {
			sl.readLocks--
		}
		s.maybeFreeLocked(l.local, sl)
	}
}

// dropHolder ends every lease that holder opened (its node is gone, so no
// release will come) and reports how many.
func (s *store) dropHolder(holder ext.WorkerID) int {
	s.mu.Lock()
	defer s.unlock()
	if s.byHolder[holder] == 0 {
		return 0
	}
	n := 0
	for lid, l := range s.leases {
		if l.holder == holder {
			s.releaseLeaseLocked(lid, l)
			n++
		}
	}
	return n
}

func (s *store) dropLeaseLocked(lid uint64, l *lease) {
	delete(s.leases, lid)
	if s.byHolder[l.holder]--; s.byHolder[l.holder] <= 0 {
		delete(s.byHolder, l.holder)
	}
	delete(s.transfers, l.transferID)
	switch {
	case l.rdma:
		s.rdmaLive--
	case l.timeout > 0:
		s.deadlines--
	}
}

func (s *store) maybeFreeLocked(id uint64, sl *slot) {
	if sl.refcount == 0 && sl.readLocks == 0 {
		s.freeLocked(id, sl)
	}
}

func (s *store) freeLocked(id uint64, sl *slot) {
	delete(s.slots, id)
	unborrow(sl)
	s.held -= int64(sl.size)
	if !sl.expires.IsZero() {
		s.deadlines--
	}
	if sl.staging != nil {
		s.retireLocked(sl)
	}
	s.countLocked()
}

// heldBytes is what the owner holds in staged slots.
func (s *store) heldBytes() (int64, int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.held, len(s.slots)
}
