package rdma

import (
	"fmt"
	"io"
	"sync/atomic"
	"unsafe"

	"github.com/velo-go/velo/metrics"
)

// StagePinned copies data into pool memory, mapping an arena when none
// has room. On failure it returns nil and the reason: RdmaBudget (the
// registered-bytes budget is spent), RdmaPoolExhausted (any other
// failure), RdmaDraining (Shutdown has begun), or RdmaNotConfigured (no
// backend); the caller stages in plain memory instead and records it.
//
// Zero-length data returns nil and RdmaBelowMin: a GET would have nothing
// to move. It is not a fallback, and the caller stages such data in plain
// memory without recording one.
func (r *Registry) StagePinned(data []byte) (*Staging, metrics.RdmaPathReason) {
	return r.stage(data, true)
}

// StageMapped is StagePinned for transparent staging: it uses only arenas
// already mapped and never maps one (a map is linear in its size, and a
// send must not stall on it), so it fails with RdmaPoolExhausted when no
// mapped pooled arena has room, or the data is large enough to need a
// dedicated arena.
func (r *Registry) StageMapped(data []byte) (*Staging, metrics.RdmaPathReason) {
	return r.stage(data, false)
}

func (r *Registry) stage(data []byte, mayMap bool) (*Staging, metrics.RdmaPathReason) {
	if len(data) == 0 {
		return nil, metrics.RdmaBelowMin
	}
	if r.b == nil {
		return nil, metrics.RdmaNotConfigured
	}
	if !r.flight.enter() {
		return nil, metrics.RdmaDraining
	}
	defer r.flight.exit()
	al, why := r.allocPool(len(data), mayMap)
	if why != metrics.RdmaOK {
		return nil, why
	}
	s := newStaging(r, al, nil, al.ptr(), len(data))
	copy(s.pool(), data)
	return s, metrics.RdmaOK
}

// Staging is one slot's registered bytes: a piece of a pool arena
// (StagePinned, StageMapped), or a range of an external region with no
// copy (StageInRegion). Its methods are safe for concurrent use.
//
// A staging counts references: its own, dropped by Release, and one for
// each ReadAt or Remote in progress. The last one out returns the
// granules (or, in a region, the in-flight guard), so Release never waits
// for a reader, and a reader never sees its bytes freed under it.
type Staging struct {
	r  *Registry
	al alloc        // pool staging
	g  *RegionGuard // region staging, nil for pool
	p  unsafe.Pointer
	n  int

	refs     atomic.Int32
	released atomic.Bool
}

func newStaging(r *Registry, al alloc, g *RegionGuard, p unsafe.Pointer, n int) *Staging {
	s := &Staging{r: r, al: al, g: g, p: p, n: n}
	s.refs.Store(1)
	return s
}

// Len is the staged size.
func (s *Staging) Len() int { return s.n }

// InRegion reports whether the staging is a range of an external region.
func (s *Staging) InRegion() bool { return s.g != nil }

func (s *Staging) pool() []byte { return unsafe.Slice((*byte)(s.p), s.n) }

func (s *Staging) registration() *registration {
	if s.g != nil {
		return &s.g.registration
	}
	return &s.al.a.registration
}

// acquire takes a reference unless the staging was released.
func (s *Staging) acquire() bool {
	for {
		if s.released.Load() {
			return false
		}
		n := s.refs.Load()
		if n == 0 {
			return false
		}
		if s.refs.CompareAndSwap(n, n+1) {
			return true
		}
	}
}

func (s *Staging) unref() {
	if s.refs.Add(-1) != 0 {
		return
	}
	if s.g != nil {
		s.g.flight.exit()
		return
	}
	s.r.free(s.al)
}

// Remote describes the staging for one GET: its absolute address and
// length, the generation of its registration, and a freshly packed key.
// It fails when the staging was released, when its memory is being
// unmapped (the shutdown sweep), or, for an external region, from the
// moment its unregistration (or Shutdown) begins.
func (s *Staging) Remote() (addr, n, generation uint64, rkey []byte, err error) {
	if !s.acquire() {
		return 0, 0, 0, nil, ErrReleased
	}
	defer s.unref()
	if s.g != nil && s.g.flight.closed() {
		return 0, 0, 0, nil, ErrDeregistered
	}
	reg := s.registration()
	k, err := reg.packKey()
	if err != nil {
		return 0, 0, 0, nil, err
	}
	return uint64(uintptr(s.p)), uint64(s.n), reg.gen, k, nil
}

// ReadAt copies staged bytes out for the chunked path (io.ReaderAt). For
// an external region it copies under the region's copy gate, so a copy in
// progress delays the unmap and a copy after the latch is refused with
// ErrDeregistered; the bytes are copied, never referenced, because a peer
// holding the key may write them at any time. A ReadAt in progress holds
// the staging, so Unregister waits for it like for the staging itself.
func (s *Staging) ReadAt(p []byte, off int64) (int, error) {
	if !s.acquire() {
		return 0, ErrReleased
	}
	defer s.unref()
	if off < 0 {
		return 0, fmt.Errorf("%w: negative offset %d", ErrBadRange, off)
	}
	if off >= int64(s.n) {
		return 0, io.EOF
	}
	want := min(len(p), s.n-int(off))
	var got int
	var err error
	if s.g == nil {
		got = copy(p[:want], s.pool()[off:])
	} else {
		got, err = s.g.copyOut(p[:want], unsafe.Add(s.p, int(off)))
	}
	if err == nil && got < len(p) {
		err = io.EOF
	}
	return got, err
}

// Release frees the staging: pool granules go back to their arena (a
// dedicated arena is unmapped), a region staging drops its in-flight hold
// on the region; either once the ReadAt and Remote calls in progress end.
// It is idempotent, never blocks on a reader, and is safe at any time,
// Shutdown included.
func (s *Staging) Release() {
	if s != nil && s.released.CompareAndSwap(false, true) {
		s.unref()
	}
}
