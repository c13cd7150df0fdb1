package rendezvous

import (
	"sync"
	"time"
)

// ChunkSize is the size of one _rv_pull answer (the last one may be shorter).
const ChunkSize = 512 << 10

// sweepEvery is how often the sweep looks for slots and leases past their deadline.
const sweepEvery = 100 * time.Millisecond

// slot is one staged payload on its owner.
type slot struct {
	data      []byte
	refcount  uint32
	readLocks uint32
	expires   time.Time // zero: no time-to-live
}

// lease is one consumer's read lock on a slot, with the one transfer its
// acquire opened (transfer ids and lease ids are drawn from one counter).
type lease struct {
	local      uint64
	transferID uint64
	chunkSize  uint32
	chunkCount uint32
	timeout    time.Duration // 0: no deadline
	deadline   time.Time
}

// store holds the owner's staged slots and the leases on them. One mutex:
// every operation under it is a few map operations, and chunk bytes are
// copied out by the transport, not under the lock.
type store struct {
	mu        sync.Mutex
	slots     map[uint64]*slot
	leases    map[uint64]*lease // by lease id
	transfers map[uint64]uint64 // transfer id → lease id
	nextID    uint64
	held      int64 // bytes in slots
	deadlines int   // slots with a TTL plus leases with a deadline

	// The sweep goroutine runs only while deadlines > 0.
	sweeping bool
	closed   bool
	stop     chan struct{}
	wg       sync.WaitGroup
	onExpire func(n int) // metrics: slots and leases the sweep ended
	onCount  func(slots int)
	now      func() time.Time
}

func newStore() *store {
	return &store{
		slots: map[uint64]*slot{}, leases: map[uint64]*lease{}, transfers: map[uint64]uint64{},
		stop: make(chan struct{}), now: time.Now,
	}
}

// register stages data (kept, not copied) with refcount 1.
func (s *store) register(data []byte, ttl time.Duration) uint64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.nextID++
	id := s.nextID
	sl := &slot{data: data, refcount: 1}
	if ttl > 0 {
		sl.expires = s.now().Add(ttl)
		s.addDeadlineLocked()
	}
	s.slots[id] = sl
	s.held += int64(len(data))
	s.countLocked()
	return id
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
	return Metadata{TotalLen: uint64(len(sl.data)), Refcount: sl.refcount}, true
}

// acquire takes a read lock and opens the chunked transfer. The
// registration is checked here, at every acquire.
func (s *store) acquire(id uint64, timeout time.Duration) (ready, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	sl, ok := s.slots[id]
	if !ok {
		return ready{}, false
	}
	sl.readLocks++
	s.nextID++
	lid := s.nextID
	n := uint64(len(sl.data))
	l := &lease{local: id, transferID: lid, chunkSize: ChunkSize, chunkCount: uint32((n + ChunkSize - 1) / ChunkSize)}
	if timeout > 0 {
		l.timeout, l.deadline = timeout, s.now().Add(timeout)
		s.addDeadlineLocked()
	}
	s.leases[lid] = l
	s.transfers[lid] = lid
	return ready{LeaseID: lid, TransferID: lid, TotalLen: n, ChunkSize: l.chunkSize, ChunkCount: l.chunkCount}, true
}

// chunk returns chunk idx of a transfer (aliasing the slot: slots are never
// written after register) and renews the lease's deadline.
func (s *store) chunk(transferID uint64, idx uint32) ([]byte, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	lid, ok := s.transfers[transferID]
	if !ok {
		return nil, false
	}
	l := s.leases[lid]
	sl := s.slots[l.local]
	if sl == nil || idx >= l.chunkCount {
		return nil, false
	}
	if l.timeout > 0 {
		l.deadline = s.now().Add(l.timeout)
	}
	off := uint64(idx) * uint64(l.chunkSize)
	end := min(off+uint64(l.chunkSize), uint64(len(sl.data)))
	return sl.data[off:end:end], true
}

// renew pushes a lease's deadline out; false when the lease is unknown.
func (s *store) renew(id, lid uint64) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	l, ok := s.leases[lid]
	if !ok || l.local != id {
		return false
	}
	if l.timeout > 0 {
		l.deadline = s.now().Add(l.timeout)
	}
	return true
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
// set (a release). The slot is freed when both counts reach zero. false
// when the lease is unknown or belongs to another slot.
func (s *store) endLease(id, lid uint64, deref bool) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	l, ok := s.leases[lid]
	if !ok || l.local != id {
		return false
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
	return true
}

// unref drops one reference with no lease (the sender's Discard).
func (s *store) unref(id uint64) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
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

func (s *store) dropLeaseLocked(lid uint64, l *lease) {
	delete(s.leases, lid)
	delete(s.transfers, l.transferID)
	if l.timeout > 0 {
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
	s.held -= int64(len(sl.data))
	if !sl.expires.IsZero() {
		s.deadlines--
	}
	s.countLocked()
}

// heldBytes is what the owner holds in staged slots.
func (s *store) heldBytes() (int64, int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.held, len(s.slots)
}

// addDeadlineLocked counts a deadline and starts the sweep if none runs.
func (s *store) addDeadlineLocked() {
	s.deadlines++
	if !s.sweeping && !s.closed {
		s.sweeping = true
		s.wg.Add(1)
		go s.sweep()
	}
}

// sweep ends slots past their time-to-live (with every lease on them) and
// leases past their deadline, every sweepEvery, and exits once nothing
// has a deadline.
func (s *store) sweep() {
	defer s.wg.Done()
	t := time.NewTicker(sweepEvery)
	defer t.Stop()
	for {
		select {
		case <-s.stop:
			return
		case <-t.C:
		}
		if !s.sweepOnce() {
			return
		}
	}
}

// sweepOnce runs one pass; false when the sweep should exit.
func (s *store) sweepOnce() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	now := s.now()
	ended := 0
	for lid, l := range s.leases {
		if l.timeout > 0 && now.After(l.deadline) {
			s.dropLeaseLocked(lid, l)
			if sl := s.slots[l.local]; sl != nil {
				if sl.readLocks > 0 {
					sl.readLocks--
				}
				s.maybeFreeLocked(l.local, sl)
			}
			ended++
		}
	}
	for id, sl := range s.slots {
		if !sl.expires.IsZero() && now.After(sl.expires) {
			for lid, l := range s.leases {
				if l.local == id {
					s.dropLeaseLocked(lid, l)
				}
			}
			s.freeLocked(id, sl)
			ended++
		}
	}
	if ended > 0 && s.onExpire != nil {
		s.onExpire(ended)
	}
	if s.deadlines <= 0 || s.closed {
		s.sweeping = false
		return false
	}
	return true
}

// close stops the sweep and waits for it.
func (s *store) close() {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return
	}
	s.closed = true
	close(s.stop)
	s.mu.Unlock()
	s.wg.Wait()
}
