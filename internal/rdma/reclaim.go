package rdma

import "time"

// Reclamation of empty pooled arenas (PoolConfig.ArenaReclaimAfter). An
// arena with no allocation has no live descriptor into it, so unmapping
// it is safe; a registration with allocations is never evicted by time
// (a stale key aborts a peer's process on InfiniBand). The sweep looks at
// the newest arenas first and keeps RetainArenaBytes of pooled arenas
// mapped, so the small first arena survives as the warm floor.
//
// One timer, armed only while an empty pooled arena could be reclaimed,
// for the moment the earliest of them is due; an arena is unmapped about
// ArenaReclaimAfter after it became empty. Dedicated arenas need no
// timer: they are unmapped as soon as their one allocation is released.

// armReclaimLocked arms the timer if reclamation is on, the timer is not
// armed, and some empty arena could be reclaimed.
func (r *Registry) armReclaimLocked() {
	after := r.cfg.Pool.ArenaReclaimAfter
	if after <= 0 || r.reclaim != nil || r.draining {
		return
	}
	victims := r.reclaimableLocked(time.Time{})
	if len(victims) == 0 {
		return
	}
	due := victims[0].emptySince
	for _, v := range victims[1:] {
		if v.emptySince.Before(due) {
			due = v.emptySince
		}
	}
	r.reclaimGen++
	gen := r.reclaimGen
	r.reclaim = time.AfterFunc(max(time.Until(due.Add(after)), 0), func() { r.reclaimSweep(gen) })
}

// disarmReclaimLocked stops the timer once nothing could be reclaimed
// (an empty arena was taken again).
func (r *Registry) disarmReclaimLocked() {
	if r.reclaim != nil && len(r.reclaimableLocked(time.Time{})) == 0 {
		r.stopReclaimLocked()
	}
}

func (r *Registry) stopReclaimLocked() {
	if r.reclaim != nil {
		r.reclaim.Stop()
		r.reclaim = nil
		r.reclaimGen++ // a callback already running finds itself stale
	}
}

// reclaimableLocked lists the arenas a sweep at now would unmap: empty,
// due (any empty one when now is zero), newest first, while what stays
// mapped is at least RetainArenaBytes.
func (r *Registry) reclaimableLocked(now time.Time) []*arena {
	p := r.cfg.Pool
	var total int64
	for _, a := range r.pooled {
		total += a.size
	}
	var victims []*arena
	for i := len(r.pooled) - 1; i >= 0; i-- {
		a := r.pooled[i]
		if a.live != 0 || total-a.size < p.RetainArenaBytes {
			continue
		}
		if !now.IsZero() && a.emptySince.Add(p.ArenaReclaimAfter).After(now) {
			continue
		}
		victims = append(victims, a)
		total -= a.size
	}
	return victims
}

// reclaimSweep is the timer's work: unmap what is due, re-arm for the rest.
func (r *Registry) reclaimSweep(gen uint64) {
	r.mu.Lock()
	if gen != r.reclaimGen || r.draining {
		r.mu.Unlock()
		return
	}
	r.reclaim = nil
	victims := r.reclaimableLocked(time.Now())
	for _, v := range victims {
		r.claimArenaLocked(v)
	}
	r.armReclaimLocked()
	r.mu.Unlock()
	for _, v := range victims {
		_ = r.retireArena(v) // a refusal is logged and leaks the arena
	}
}
