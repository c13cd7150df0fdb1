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
	backendMem bool // the backend allocated mem (Allocator): its unmap frees it
	// unmapWhenFree: retired with allocations still live (backendMem
	// only); the last free runs the unmap (under Registry.mu).
	unmapWhenFree bool
	size          int64
	dedicated     bool
	sub           *suballoc // pooled arenas only
	live          int       // allocations not yet released (under Registry.mu)
	emptySince    time.Time // when live last fell to zero (pooled)
	unmapOK       bool      // the backend confirmed the unmap (under Registry.mu)
	freed         bool      // munmap claimed (under Registry.mu)
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
	if al, ok := r.b.(Allocator); ok {
		base, m, err := al.Alloc(int(size))
		if err != nil {
			return nil, fmt.Errorf("%w: %w", ErrMapFailed, err)
		}
		mem := unsafe.Slice((*byte)(base), int(size))
		return r.newArena(m, mem, size, dedicated, true), nil
	}
	mem, err := unix.Mmap(-1, 0, int(size), unix.PROT_READ|unix.PROT_WRITE, unix.MAP_PRIVATE|unix.MAP_ANON)
	if err != nil {
		return nil, fmt.Errorf("rdma: mmap of %d bytes: %w", size, err)
	}
	m, err := r.b.Map(unsafe.Pointer(&mem[0]), len(mem))
	if err != nil {
		_ = unix.Munmap(mem) // never registered: ours to free
		return nil, fmt.Errorf("%w: %w", ErrMapFailed, err)
	}
	return r.newArena(m, mem, size, dedicated, false), nil
}

func (r *Registry) newArena(m Mapping, mem []byte, size int64, dedicated, backendMem bool) *arena {
	a := &arena{registration: newRegistration(m, r.gen.Add(1)), mem: mem, size: size, dedicated: dedicated, backendMem: backendMem}
	if !dedicated {
		a.sub = newSuballoc(uint32(size / granuleBytes))
	}
	return a
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
	if a.backendMem && r.deferUnmap(a) {
		return nil
	}
	return r.unmapArena(a)
}

// deferUnmap: the unmap of memory the backend allocated frees it, so it
// waits for the last allocation in it (a GET may still be writing a
// destination) and free runs it then. It reports whether it deferred.
func (r *Registry) deferUnmap(a *arena) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	if a.live == 0 {
		return false
	}
	a.unmapWhenFree = true
	return true
}

func (r *Registry) unmapArena(a *arena) error {
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
	if a.backendMem {
		return // the backend's unmap freed it
	}
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
	retire, munmap, unmap := false, false, false
	switch {
	case a.state == stateLive && a.dedicated:
		retire = r.claimArenaLocked(a)
	case a.state == stateLive:
		if a.live == 0 {
			a.emptySince = time.Now()
			r.armReclaimLocked()
		}
	case a.unmapWhenFree && a.live == 0:
		a.unmapWhenFree, unmap = false, true
	default:
		munmap = a.claimFreeLocked()
	}
	r.mu.Unlock()
	if retire {
		_ = r.retireArena(a) // a refusal is logged; the caller can do nothing about it
	}
	if unmap {
		_ = r.unmapArena(a) // the retirement deferred to the last free
	}
	if munmap {
		r.munmap(a)
	}
}
