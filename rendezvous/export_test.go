package rendezvous

import "github.com/velo-go/velo/ext"

// FetchAllocs is how many destination buffers Fetch has allocated.
func FetchAllocs() int64 { return fetchAllocs.Load() }

// Sweeping reports whether the sweep goroutine runs.
func Sweeping(r *Manager) bool {
	r.st.mu.Lock()
	defer r.st.mu.Unlock()
	return r.st.sweeping
}

// SetAcquireHook runs f at the start of every _rv_acquire the owner answers.
func SetAcquireHook(r *Manager, f func()) {
	if f == nil {
		r.acquireHook.Store(nil)
		return
	}
	r.acquireHook.Store(&f)
}

// FetchAllocBytes is the capacity, in bytes, of the destination buffers
// Get and Fetch have allocated.
func FetchAllocBytes() int64 { return fetchAllocBytes.Load() }

// LeaseOf reports the transfer and the holder of a lease on r.
func LeaseOf(r *Manager, lease uint64) (transfer uint64, holder ext.WorkerID, ok bool) {
	r.st.mu.Lock()
	defer r.st.mu.Unlock()
	l, ok := r.st.leases[lease]
	if !ok {
		return 0, 0, false
	}
	return l.transferID, l.holder, true
}

// FromRemote is fromRemote: a remote refusal matched to its sentinel.
func FromRemote(err error) error { return fromRemote(err) }

// DirectChunks is how many pulled chunks a transport read straight into
// their place.
func DirectChunks() int64 { return directChunks.Load() }

// chunk is take for a slot that is not lent (the store's tests).
func (s *store) chunk(transferID uint64, idx uint32, asker ext.WorkerID) ([]byte, verdict) {
	b, _, v := s.take(transferID, idx, asker)
	return b, v
}

// StageCopies is how many payloads Stage has copied.
func StageCopies() int64 { return stageCopies.Load() }

// LentWaits is how many withdraws of a lent payload waited for the
// transport to finish with pull answers.
func LentWaits() int64 { return lentWaits.Load() }

// StageLent is (*Manager).StageLent.
func StageLent(r *Manager, payload []byte) (handle DataHandle, withdraw func()) {
	s, withdraw, err := r.StageLent(payload, 0)
	if err != nil {
		panic(err)
	}
	h, err := ParseHandle(s)
	if err != nil {
		panic(err)
	}
	return h, withdraw
}

// Reaping reports whether the RDMA lease reaper runs.
func Reaping(r *Manager) bool {
	r.st.mu.Lock()
	defer r.st.mu.Unlock()
	return r.st.reaping
}

// AllocDest is allocDest: a fetch destination of capacity n.
func AllocDest(n int) []byte { return allocDest(n) }

// UnclearedDestinations reports whether this build skips clearing fetch
// destinations (nozero.go) or clears them (nozero_other.go).
const UnclearedDestinations = unclearedDestinations

// SpentGiven is how many fetched payloads were given back (Recycle).
func SpentGiven() int64 { return spentGiven.Load() }

// SpentTaken is how many fetches wrote into a given-back payload.
func SpentTaken() int64 { return spentTaken.Load() }

// SpentHeld is how many given-back payloads are kept now.
func SpentHeld() int {
	n := 0
	for i := range spentDests {
		l := &spentDests[i]
		l.mu.Lock()
		n += len(l.bufs)
		l.mu.Unlock()
	}
	return n
}

// SpentRefused is how many payloads Recycle refused as borrowed memory.
func SpentRefused() int64 { return spentRefused.Load() }

// BorrowedListed is how many slots the borrowed list holds, live and freed
// (those whose loan went idle let go first).
func BorrowedListed() int64 {
	borrowed.mu.Lock()
	defer borrowed.mu.Unlock()
	pruneFreedLocked()
	return borrowed.n.Load()
}

// GrownBytes is how many bytes growing destinations copied.
func GrownBytes() int64 { return grownBytes.Load() }

// DropSpent lets go of every given-back buffer, for a test that counts
// allocations from a known start.
func DropSpent() {
	for i := range spentDests {
		l := &spentDests[i]
		l.mu.Lock()
		clear(l.bufs)
		l.bufs = l.bufs[:0]
		l.mu.Unlock()
	}
}
