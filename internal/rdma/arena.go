package rdma

import (
	"fmt"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/velo-go/velo/metrics"
)

// arena is one anonymous mmap registered whole with the backend: a pooled
// arena that a suballocator carves into granules, or a dedicated arena
// that serves one large request.
//
// Its pages outlive its registration: they are unmapped from the process
// only after the backend confirmed the unmap and every allocation in them
// was released. A refused unmap leaks them, on purpose: freeing pages the
// backend may still pin is the hazard this layer exists to prevent.
type arena struct {
	registration
	mem        []byte
	size       int64
	dedicated  bool
	sub        *suballoc // pooled arenas only
	live       int       // allocations not yet released (under Registry.mu)
	emptySince time.Time // when live last fell to zero (pooled)
	unmapOK    bool      // the backend confirmed the unmap (under Registry.mu)
	freed      bool      // munmap claimed (under Registry.mu)
}

// alloc is the private free token of one allocation: a staging or a
// GET destination holds it. A peer's descriptor names the same bytes but
// can neither free them nor keep them alive.
type alloc struct {
	a   *arena
	off uint32 // first granule
}

func (al alloc) ptr() unsafe.Pointer {
	return unsafe.Pointer(&al.a.mem[int64(al.off)*granuleBytes])
}

// granules is how many granules hold n bytes.
func granules(n int) uint32 { return uint32((int64(n) + granuleBytes - 1) / granuleBytes) }

// mapArena mmaps size bytes and registers them. The caller reserved the
// budget; it runs with no lock held, since a map costs time linear in
// its size.
func (r *Registry) mapArena(size int64, dedicated bool) (*arena, error) {
	mem, err := unix.Mmap(-1, 0, int(size), unix.PROT_READ|unix.PROT_WRITE, unix.MAP_PRIVATE|unix.MAP_ANON)
	if err != nil {
		return nil, fmt.Errorf("rdma: mmap of %d bytes: %w", size, err)
	}
	m, err := r.b.Map(unsafe.Pointer(&mem[0]), len(mem))
	if err != nil {
		_ = unix.Munmap(mem) // never registered: ours to free
		return nil, fmt.Errorf("%w: %w", ErrMapFailed, err)
	}
	a := &arena{registration: newRegistration(m, r.gen.Add(1)), mem: mem, size: size, dedicated: dedicated}
	if !dedicated {
		a.sub = newSuballoc(uint32(size / granuleBytes))
	}
	return a, nil
}

// adoptLocked enters a freshly mapped arena in the registry, reconciling
// the reserved budget with what the backend pinned. After the sweep of a
// forced shutdown it refuses: the caller then retires the arena itself.
func (r *Registry) adoptLocked(a *arena, reserved int64) bool {
	r.accountLocked(a.pinned-reserved, 1)
	r.met.RdmaRegistration(metrics.RdmaRegArena)
	if r.swept {
		a.state = stateUnmapping
		return false
	}
	r.arenas[a] = struct{}{}
	if !a.dedicated {
		r.pooled = append(r.pooled, a)
	}
	return true
}

// claimArenaLocked makes the caller the arena's one retirer.
func (r *Registry) claimArenaLocked(a *arena) bool {
	if a.state != stateLive {
		return false
	}
	a.state = stateUnmapping
	if !a.dedicated {
		for i, p := range r.pooled {
			if p == a {
				r.pooled = append(r.pooled[:i], r.pooled[i+1:]...)
				break
			}
		}
	}
	return true
}

// retireArena unmaps an arena its caller claimed, and frees its pages if
// nothing in them is still held.
func (r *Registry) retireArena(a *arena) error {
	a.latch()
	err := a.mapping.Unmap()
	r.mu.Lock()
	a.state = stateGone
	delete(r.arenas, a)
	munmap := false
	if err == nil {
		r.accountLocked(-a.pinned, -1)
		a.unmapOK = true
		munmap = a.claimFreeLocked()
	} else {
		r.leakedArenas = append(r.leakedArenas, a)
	}
	r.mu.Unlock()
	if err != nil {
		r.log.Error("rdma: the backend refused to unmap an arena; its memory is leaked, as it may still be pinned",
			"bytes", a.size, "err", err)
		err = fmt.Errorf("rdma: unmap of an arena of %d bytes: %w", a.size, err)
	}
	if munmap {
		r.munmap(a)
	}
	close(a.done)
	return err
}

// claimFreeLocked reports whether the caller should munmap the arena now.
func (a *arena) claimFreeLocked() bool {
	if a.unmapOK && a.live == 0 && !a.freed {
		a.freed = true
		return true
	}
	return false
}

func (r *Registry) munmap(a *arena) {
	if err := unix.Munmap(a.mem); err != nil {
		r.log.Error("rdma: munmap of an arena", "bytes", a.size, "err", err)
	}
}

// free releases one allocation. The last one out of a dedicated arena
// retires it; the last one out of an arena already unmapped frees its
// pages.
func (r *Registry) free(al alloc) {
	a := al.a
	r.mu.Lock()
	a.live--
	if a.sub != nil {
		a.sub.release(al.off)
	}
	retire, munmap := false, false
	switch {
	case a.state == stateLive && a.dedicated:
		retire = r.claimArenaLocked(a)
	case a.state == stateLive:
		if a.live == 0 {
			a.emptySince = time.Now()
			r.armReclaimLocked()
		}
	default:
		munmap = a.claimFreeLocked()
	}
	r.mu.Unlock()
	if retire {
		_ = r.retireArena(a) // a refusal is logged; the caller can do nothing about it
	}
	if munmap {
		r.munmap(a)
	}
}
