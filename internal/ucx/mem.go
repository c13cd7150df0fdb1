//go:build ucx

package ucx

/*
#include "shim.h"
*/
import "C"

import (
	"context"
	"fmt"
	"os"
	"runtime"
	"sync/atomic"
	"unsafe"
)

// Mem is a region of caller memory mapped with ucp_mem_map, readable by
// peers that hold its packed key.
type Mem struct {
	w        *Worker
	base     uintptr
	ptr      unsafe.Pointer // base as a pointer
	n        int
	effBase  uintptr
	effLen   int
	rkey     []byte         // packed once at Map
	pin      runtime.Pinner // pins base while mapped, if it is Go memory
	unmapped atomic.Bool
	h        C.ucp_mem_h  // loop-owned from here
	gated    bool         // an Unmap waits; new GETs into it are refused
	waiters  []chan error // parked Unmap calls
}

// Map maps n bytes at base, which stay the caller's and must stay valid
// until Unmap returns. Go memory is pinned until then. The key is packed
// here, once, with ucp_rkey_pack.
func (w *Worker) Map(base unsafe.Pointer, n int) (*Mem, error) {
	if base == nil || n <= 0 {
		return nil, fmt.Errorf("ucx: Map of %d bytes at %p", n, base)
	}
	m := &Mem{w: w, base: uintptr(base), ptr: base, n: n}
	m.pin.Pin(base) // does nothing for memory Go does not own
	m2, err := call(w, func(l *loop) (*Mem, error) { return m, l.mapMem(m, base) })
	if err != nil {
		m.pin.Unpin()
		return nil, err
	}
	return m2, nil
}

// Alloc allocates n bytes with UCX (UCP_MEM_MAP_ALLOCATE) and maps them.
// UCX picks the memory domain that allocates: with its shared-memory
// transports, a peer on the host then reads the memory directly (its GET
// is a copy out of a segment it attached), with no work on this side,
// where memory from Map is read by emulation that this worker's progress
// loop answers. Unmap frees the memory.
func (w *Worker) Alloc(n int) (*Mem, error) {
	if n <= 0 {
		return nil, fmt.Errorf("ucx: Alloc of %d bytes", n)
	}
	m := &Mem{w: w, n: n}
	return call(w, func(l *loop) (*Mem, error) {
		if err := l.mapMem(m, nil); err != nil {
			return nil, err
		}
		m.ptr = C.vu_mem_addr(m.h)
		m.base = uintptr(m.ptr)
		return m, nil
	})
}

// Base is the first byte of the region: what Map was given, or what
// Alloc allocated.
func (m *Mem) Base() unsafe.Pointer { return m.ptr }

func (l *loop) mapMem(m *Mem, base unsafe.Pointer) error {
	if l.closing {
		return ErrClosed
	}
	var eb C.uintptr_t
	var el C.size_t
	if st := C.vu_mem_map(l.ctx, base, C.size_t(m.n), &m.h, &eb, &el); st != statusOK {
		return statusError(errMap, "ucp_mem_map", st)
	}
	buf := C.malloc(MaxRkeyLen)
	defer C.free(buf)
	var kl C.size_t
	if st := C.vu_rkey_pack(l.ctx, m.h, buf, MaxRkeyLen, &kl); st != statusOK {
		C.ucp_mem_unmap(l.ctx, m.h)
		return statusError(ErrBadRkey, "ucp_rkey_pack", st)
	}
	m.rkey = C.GoBytes(buf, C.int(kl))
	m.effBase, m.effLen = pageRange(uintptr(eb), int(el))
	l.mems[m] = struct{}{}
	return nil
}

// errMap is what a failed ucp_mem_map wraps.
var errMap = fmt.Errorf("ucx: Map failed")

// pageRange rounds a range out to whole pages, what a registration pins.
func pageRange(base uintptr, n int) (uintptr, int) {
	pg := uintptr(os.Getpagesize())
	lo := base &^ (pg - 1)
	hi := (base + uintptr(n) + pg - 1) &^ (pg - 1)
	return lo, int(hi - lo)
}

// PackRkey returns a copy of the region's packed remote key (at most
// MaxRkeyLen bytes).
func (m *Mem) PackRkey() ([]byte, error) {
	if m.unmapped.Load() {
		return nil, ErrUnmapped
	}
	return append([]byte(nil), m.rkey...), nil
}

// Addr is the region's base, as Map was given it: the remote address of
// its first byte.
func (m *Mem) Addr() uint64 { return uint64(m.base) }

// Len is the region's length, as Map was given it.
func (m *Mem) Len() int { return m.n }

// EffectiveRange is what the mapping may expose: the range UCX reports
// (ucp_mem_query), rounded out to whole pages. A GET must still stay in
// [Addr, Addr+Len).
func (m *Mem) EffectiveRange() (uintptr, int) { return m.effBase, m.effLen }

// Unmap ends the mapping and unpins the memory. A peer's GETs are not
// visible here, so they do not delay it (a peer that reads later gets an
// error). GETs of this worker whose destination lies in the region do:
// Unmap waits for them, and from its call on new ones are refused.
// Repeated calls wait likewise and return nil; after Close it returns nil
// (Close unmaps every region).
func (m *Mem) Unmap() error {
	w := m.w
	if w.onLoop() {
		return ErrProgressThread
	}
	wait := make(chan error, 1)
	err := w.submit(context.Background(), func(l *loop) { l.unmap(m, wait) })
	if err != nil {
		<-w.done // Close unmaps everything before it finishes
		return nil
	}
	return <-wait
}

func (l *loop) unmap(m *Mem, wait chan error) {
	if m.h == nil {
		wait <- nil
		return
	}
	m.waiters = append(m.waiters, wait)
	if !m.gated {
		m.gated = true
		l.unmaps = append(l.unmaps, m)
	}
	l.tryUnmaps()
}

// tryUnmaps finishes parked unmaps whose region no GET of this worker is
// writing into.
func (l *loop) tryUnmaps() {
	kept := l.unmaps[:0]
	for _, m := range l.unmaps {
		if l.getsInto(m) {
			kept = append(kept, m)
			continue
		}
		l.release(m)
	}
	clear(l.unmaps[len(kept):])
	l.unmaps = kept
	l.w.stats.unmapsWait.Store(int64(len(kept)))
}

// getsInto reports whether an outstanding GET writes into m.
func (l *loop) getsInto(m *Mem) bool {
	for _, o := range l.ops {
		if o.kind == opGet && overlaps(o.dst, m) {
			return true
		}
	}
	return false
}

func overlaps(r [2]uintptr, m *Mem) bool {
	return r[0] < m.base+uintptr(m.n) && m.base < r[1]
}

// release unmaps m now and answers its waiters.
func (l *loop) release(m *Mem) {
	var err error
	if st := C.ucp_mem_unmap(l.ctx, m.h); st != statusOK {
		err = statusError(errMap, "ucp_mem_unmap", st)
	}
	m.h = nil
	m.unmapped.Store(true)
	m.pin.Unpin()
	delete(l.mems, m)
	for _, wt := range m.waiters {
		wt <- err
	}
	m.waiters = nil
}
