package rdma

// Test seams for the external test package.

// SetCopyHook makes f run inside every region copy, under the copy gate.
func SetCopyHook(r *Registry, f func()) { r.copyHook = f }

// SetLatchHook makes f run just before a region's latch takes its gate.
func SetLatchHook(r *Registry, f func()) { r.latchHook = f }

// ReclaimArmed reports whether the reclamation timer exists.
func ReclaimArmed(r *Registry) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.reclaim != nil
}
