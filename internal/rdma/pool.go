package rdma

import "github.com/velo-go/velo/metrics"

// allocPool finds n bytes of pool memory. mayMap false (transparent
// staging) uses only the pooled arenas already mapped. The reason is
// RdmaOK, or why nothing was found: RdmaBudget, RdmaPoolExhausted, or
// RdmaDraining when a forced shutdown swept the registry mid-map.
func (r *Registry) allocPool(n int, mayMap bool) (alloc, metrics.RdmaPathReason) {
	if int64(n) >= r.cfg.Pool.DedicatedArenaMin {
		if !mayMap {
			return alloc{}, metrics.RdmaPoolExhausted
		}
		return r.allocDedicated(n)
	}
	need := granules(n)
	if al, ok := r.allocMapped(need); ok {
		return al, metrics.RdmaOK
	}
	if !mayMap {
		return alloc{}, metrics.RdmaPoolExhausted
	}
	r.grow.Lock()
	defer r.grow.Unlock()
	if al, ok := r.allocMapped(need); ok { // a racing stager grew the pool
		return al, metrics.RdmaOK
	}
	return r.growPool(n)
}

// allocMapped allocates from the live pooled arenas, oldest first, so
// the newest stay empty longest and reclamation can take them.
func (r *Registry) allocMapped(need uint32) (alloc, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, a := range r.pooled {
		if off, ok := a.sub.alloc(need); ok {
			r.takeLocked(a)
			return alloc{a, off}, true
		}
	}
	return alloc{}, false
}

func (r *Registry) takeLocked(a *arena) {
	a.live++
	if a.live == 1 && !a.dedicated {
		r.disarmReclaimLocked()
	}
}

// growPool maps a new pooled arena and allocates n bytes from it.
func (r *Registry) growPool(n int) (alloc, metrics.RdmaPathReason) {
	need := int64(granules(n)) * granuleBytes
	r.mu.Lock()
	size, dedicated, why := r.nextArenaLocked(need)
	if dedicated {
		r.mu.Unlock()
		return r.allocDedicated(n)
	}
	if why != metrics.RdmaOK {
		r.mu.Unlock()
		return alloc{}, why
	}
	r.accountLocked(size, 0) // reserve, so a racing registration cannot spend it
	r.mu.Unlock()

	a, err := r.mapArena(size, false)
	r.mu.Lock()
	if err != nil {
		r.accountLocked(-size, 0)
		r.mu.Unlock()
		r.log.Warn("rdma: could not map a pool arena", "bytes", size, "err", err)
		return alloc{}, metrics.RdmaPoolExhausted
	}
	if !r.adoptLocked(a, size) {
		r.mu.Unlock()
		_ = r.retireArena(a)
		return alloc{}, metrics.RdmaDraining
	}
	off, _ := a.sub.alloc(granules(n)) // a fresh arena of at least need bytes
	r.takeLocked(a)
	r.mu.Unlock()
	return alloc{a, off}, metrics.RdmaOK
}

// nextArenaLocked sizes the next pooled arena: twice the largest live one
// (the first is InitialArenaBytes), capped at MaxArenaBytes, large enough
// for need. When the budget cannot take it, it halves, down to the larger
// of need and InitialArenaBytes, before refusing with RdmaBudget. A need
// no pooled arena can hold goes to a dedicated arena.
func (r *Registry) nextArenaLocked(need int64) (size int64, dedicated bool, why metrics.RdmaPathReason) {
	p := r.cfg.Pool
	size = p.InitialArenaBytes
	for _, a := range r.pooled {
		size = max(size, min(2*a.size, p.MaxArenaBytes))
	}
	for size < need && size < p.MaxArenaBytes {
		size = min(2*size, p.MaxArenaBytes)
	}
	if size < need {
		return 0, true, metrics.RdmaOK
	}
	floor := max(need, p.InitialArenaBytes)
	for r.registered+size > p.RegisteredBytesBudget && size/2 >= floor {
		size = pages(size / 2)
	}
	if r.registered+size > p.RegisteredBytesBudget {
		return 0, false, metrics.RdmaBudget
	}
	return size, false, metrics.RdmaOK
}

// allocDedicated maps an arena of its own for one request.
func (r *Registry) allocDedicated(n int) (alloc, metrics.RdmaPathReason) {
	size := pages(int64(n))
	r.mu.Lock()
	if r.registered+size > r.cfg.Pool.RegisteredBytesBudget {
		r.mu.Unlock()
		return alloc{}, metrics.RdmaBudget
	}
	r.accountLocked(size, 0)
	r.mu.Unlock()

	a, err := r.mapArena(size, true)
	r.mu.Lock()
	if err != nil {
		r.accountLocked(-size, 0)
		r.mu.Unlock()
		r.log.Warn("rdma: could not map a dedicated arena", "bytes", size, "err", err)
		return alloc{}, metrics.RdmaPoolExhausted
	}
	if !r.adoptLocked(a, size) {
		r.mu.Unlock()
		_ = r.retireArena(a)
		return alloc{}, metrics.RdmaDraining
	}
	a.live = 1
	r.mu.Unlock()
	return alloc{a, 0}, metrics.RdmaOK
}
