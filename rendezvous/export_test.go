package rendezvous

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
