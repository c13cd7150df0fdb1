package rendezvous

// StoreView is what the owner side of rendezvous holds now, for a debug
// view: staged slots and their bytes, open leases (consumers reading a
// slot) and their transfers.
type StoreView struct {
	Slots     int
	Bytes     int64
	Leases    int
	Transfers int
	// Staged and Fetched count transparent stagings of request payloads
	// (this node's, and peers' fetched by this node) over its life.
	Staged, Fetched int64
}

// View reads the store in one short hold of its lock.
func (r *Manager) View() StoreView {
	s := r.st
	s.mu.Lock()
	v := StoreView{Slots: len(s.slots), Bytes: s.held, Leases: len(s.leases), Transfers: len(s.transfers)}
	s.mu.Unlock()
	v.Staged, v.Fetched = r.Transparent()
	return v
}
