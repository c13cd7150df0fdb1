package messenger

// SpawnCounts is how many of handler's requests ran on a reader after it
// handed its connection on (inline), and how many pool workers were woken
// or started for it (wakes).
func (m *Messenger) SpawnCounts(handler string) (inline int64, wakes int) {
	r := (*m.handlers.Load())[handler]
	if r == nil {
		return 0, 0
	}
	r.pool.mu.Lock()
	defer r.pool.mu.Unlock()
	return r.pool.inline.Load(), r.pool.handoffs
}

// SpawnIdle reports whether handler's pool has nothing queued, running or
// on its way: what a lone request must find to run on its reader.
func (m *Messenger) SpawnIdle(handler string) bool {
	r := (*m.handlers.Load())[handler]
	if r == nil {
		return false
	}
	r.pool.mu.Lock()
	defer r.pool.mu.Unlock()
	return r.pool.q.n == 0 && r.pool.running == 0 && r.pool.searching == 0
}

// SpawnQueueStats is what handler's pool counted of its queue's bound: the
// most requests it held at once and how often a reader waited for it.
func (m *Messenger) SpawnQueueStats(handler string) (maxQueued, pauses int) {
	r := (*m.handlers.Load())[handler]
	if r == nil {
		return 0, 0
	}
	r.pool.mu.Lock()
	defer r.pool.mu.Unlock()
	return r.pool.maxQueued, r.pool.pauses
}

// OnSpawnPause has f run on a reader each time it starts to wait for
// handler's spawn queue to go down (awaitDrain). Set it before the reads.
func (m *Messenger) OnSpawnPause(handler string, f func()) {
	r := (*m.handlers.Load())[handler]
	r.pool.mu.Lock()
	r.pool.onPause = f
	r.pool.mu.Unlock()
}
