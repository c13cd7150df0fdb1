package rendezvous

import "time"

// Pinned slots: bytes staged in registered memory (RegisterDataPinned,
// RegisterDataInRegion, transparent staging on an RDMA node) rather than
// in a Go slice. A peer reads them by GET, and the chunked path copies
// them out, since a peer holding the key may write the memory at any time
// and the store must not hand a transport a slice of it.
//
// The staging is released when the slot is freed or demoted, but never
// while a copy out of it runs, nor while the owner builds a descriptor
// from it: each of those takes a hold (readers) under the store's lock,
// and a staging let go under a hold is released by the last one.

// stagingMem is a slot's registered memory: *rdma.Staging, or a test's.
type stagingMem interface {
	Len() int
	Remote() (addr, n, generation uint64, rkey []byte, err error)
	ReadAt(p []byte, off int64) (int, error)
	Release()
}

// pinned is the registered side of a slot.
type pinned struct {
	staging stagingMem // nil: the slot is in plain memory
	readers int        // holds on staging or retired
	retired stagingMem // let go while held; the last hold releases it
}

// pinHold keeps one staging from release while its holder reads it.
type pinHold struct {
	sl  *slot
	st  stagingMem
	off int64 // where the holder reads (a chunk's offset)
}

// addStaged stages st with refcount 1.
func (s *store) addStaged(st stagingMem, ttl time.Duration) uint64 {
	return s.add(&slot{size: st.Len(), pinned: pinned{staging: st}}, ttl)
}

// pinLocked holds sl's staging; nil for a slot in plain memory.
func (s *store) pinLocked(sl *slot) *pinHold { return s.pinLockedAt(sl, 0) }

func (s *store) pinLockedAt(sl *slot, off int64) *pinHold {
	if sl.staging == nil {
		return nil
	}
	sl.readers++
	return &pinHold{sl: sl, st: sl.staging, off: off}
}

// unpin ends a hold (nil: none).
func (s *store) unpin(h *pinHold) {
	if h == nil {
		return
	}
	s.mu.Lock()
	s.unpinLocked(h)
	s.unlock()
}

func (s *store) unpinLocked(h *pinHold) {
	sl := h.sl
	sl.readers--
	if sl.readers == 0 && sl.retired != nil {
		s.pending = append(s.pending, sl.retired)
		sl.retired = nil
		s.retiredBusy--
		s.idle.Broadcast()
	}
}

// retireLocked lets sl's staging go: now, or at its last hold's end.
func (s *store) retireLocked(sl *slot) {
	st := sl.staging
	sl.staging = nil
	if sl.readers == 0 {
		s.pending = append(s.pending, st)
		return
	}
	sl.retired = st
	s.retiredBusy++
}

// readPinned fills buf from the held staging at the hold's offset and
// ends the hold. A staging that refuses the read (an external region
// deregistered under its slot) makes the chunk not found, as a withdrawn
// slot's would be.
func (s *store) readPinned(h *pinHold, buf []byte) ([]byte, verdict) {
	n, err := h.st.ReadAt(buf, h.off)
	s.unpin(h)
	if err != nil || n != len(buf) {
		return nil, notFound
	}
	return buf, done
}

// demote copies every pinned slot into plain memory and lets its staging
// go, at shutdown, before the registry unmaps: a chunked pull admitted
// before the drain then finishes from the copy. A GET in flight holds a
// descriptor for the old memory, and fails at its own end. demote returns
// once no copy out of a staging it let go is still running, and reports
// how many slots it moved. A slot whose staging refuses the copy stays
// pinned, and its pulls fail once the region is gone.
func (s *store) demote() int {
	s.mu.Lock()
	var holds []*pinHold
	for _, sl := range s.slots {
		if h := s.pinLocked(sl); h != nil {
			holds = append(holds, h)
		}
	}
	s.mu.Unlock()
	moved := 0
	for _, h := range holds {
		buf := make([]byte, h.sl.size)
		n, err := h.st.ReadAt(buf, 0)
		s.mu.Lock()
		if err == nil && n == len(buf) && h.sl.staging == h.st {
			h.sl.data = buf
			s.retireLocked(h.sl)
			moved++
		}
		s.unpinLocked(h)
		s.unlock()
	}
	s.mu.Lock()
	for s.retiredBusy > 0 {
		s.idle.Wait()
	}
	s.unlock()
	return moved
}
