package rdma

import (
	"errors"
	"fmt"
	"runtime"
	"sync"
	"time"
	"unsafe"

	"github.com/velo-go/velo/metrics"
)

// DrainResult is how an unregistration ended. Both results mean the
// registration is gone; they differ in whether in-flight work was waited for.
type DrainResult uint8

const (
	// Drained: every staging and copy in the region ended before the unmap.
	Drained DrainResult = iota
	// DrainTimedOut: the wait ran out (or a forced shutdown cut it short)
	// and the unmap went ahead under in-flight work. Copies after the
	// latch are refused; a peer mid-GET fails at its end.
	DrainTimedOut
)

func (d DrainResult) String() string {
	if d == Drained {
		return "drained"
	}
	return "drain_timed_out"
}

// copyChunk bounds one copy under a region's gate, so a long chunked read
// delays the latch by at most one chunk.
const copyChunk = 512 << 10

// errLeaked marks a registration whose unmap the backend refused.
var errLeaked = errors.New("rdma: registration leaked")

// RegionGuard is the caller's hold on an external registration
// (RegisterExternal, RegisterOwned). It does not borrow the memory; it is
// the memory's release signal: the caller may free or reuse the memory
// only once Deregistered is closed.
type RegionGuard struct {
	registration
	r      *Registry
	base   unsafe.Pointer
	n      int
	owned  []byte          // RegisterOwned's buffer, held until the unmap is confirmed
	pin    *runtime.Pinner // pins owned while registered
	flight *flight         // stagings and copies in the region

	dereg     chan struct{}
	deregOnce sync.Once
	result    DrainResult // set before done closes
	err       error
}

// RegisterExternal registers n bytes at ptr, memory the caller owns. The
// caller guarantees, until the guard's Deregistered is closed: the bytes
// are valid for reads and writes (a read-only mapping is undefined
// behaviour at the backend), the range does not wrap, the memory is not
// freed, moved or remapped, and nothing treats it as data it owns alone,
// since a peer holding a key can write it at any time. Whole pages around
// the range are pinned and remotely writable (see EffectiveRange).
//
// Errors: ErrBadRange, ErrBudget (a routine refusal), ErrMapFailed,
// ErrShutdown.
func (r *Registry) RegisterExternal(ptr unsafe.Pointer, n int) (*RegionGuard, error) {
	if ptr == nil || n <= 0 || uintptr(ptr)+uintptr(n) < uintptr(ptr) {
		return nil, fmt.Errorf("%w: %d bytes at %p", ErrBadRange, n, ptr)
	}
	return r.registerRegion(ptr, n, nil, nil)
}

// RegisterOwned registers buf, which the registry holds (pinned) until an
// unmap is confirmed; UnregisterOwned gives it back. On failure the error
// is a *RegisterOwnedError carrying buf back untouched; errors.Is matches
// its cause (ErrBudget, ErrBadRange, ErrMapFailed, ErrShutdown).
func (r *Registry) RegisterOwned(buf []byte) (*RegionGuard, error) {
	if len(buf) == 0 {
		return nil, &RegisterOwnedError{Buf: buf, Err: ErrBadRange}
	}
	pin := new(runtime.Pinner)
	pin.Pin(&buf[0])
	g, err := r.registerRegion(unsafe.Pointer(&buf[0]), len(buf), buf, pin)
	if err != nil {
		if errors.Is(err, errLeaked) { // the registry keeps it: it may still be pinned
			return nil, &RegisterOwnedError{Err: err}
		}
		pin.Unpin()
		return nil, &RegisterOwnedError{Buf: buf, Err: err}
	}
	return g, nil
}

func (r *Registry) registerRegion(ptr unsafe.Pointer, n int, owned []byte, pin *runtime.Pinner) (*RegionGuard, error) {
	if r.b == nil {
		return nil, fmt.Errorf("%w: no backend", ErrMapFailed)
	}
	if !r.flight.enter() {
		return nil, ErrShutdown
	}
	defer r.flight.exit()
	lo := uintptr(ptr) &^ uintptr(pageSize-1)
	want := pages(int64(uintptr(ptr) + uintptr(n) - lo))
	r.mu.Lock()
	if r.registered+want > r.cfg.Pool.RegisteredBytesBudget {
		r.mu.Unlock()
		return nil, ErrBudget
	}
	r.accountLocked(want, 0)
	r.mu.Unlock()

	m, err := r.b.Map(ptr, n)
	r.mu.Lock()
	if err != nil {
		r.accountLocked(-want, 0)
		r.mu.Unlock()
		return nil, fmt.Errorf("%w: %w", ErrMapFailed, err)
	}
	g := &RegionGuard{
		registration: newRegistration(m, r.gen.Add(1)),
		r:            r, base: ptr, n: n, owned: owned, pin: pin,
		flight: newFlight(), dereg: make(chan struct{}),
	}
	r.accountLocked(g.pinned-want, 1)
	r.met.RdmaRegistration(metrics.RdmaRegExternal)
	if r.swept { // a forced shutdown swept while we mapped
		g.state = stateUnmapping
		r.mu.Unlock()
		if err := r.retireRegion(g, Drained); err != nil {
			return nil, fmt.Errorf("%w: %w: %w", ErrShutdown, errLeaked, err)
		}
		return nil, ErrShutdown
	}
	r.regions[g] = struct{}{}
	if r.draining {
		g.flight.close()
	}
	r.mu.Unlock()
	return g, nil
}

// StageInRegion stages n bytes at off of an external region, with no
// copy. off is relative to the registered pointer and the range is
// checked against the registered length, so no byte of the page-rounded
// effective range outside the caller's allocation can be named. The
// staging holds an in-flight guard on the region until Release, so
// Unregister waits for it.
//
// Errors: ErrBadRange, ErrDeregistered, ErrShutdown.
func (r *Registry) StageInRegion(g *RegionGuard, off, n int) (*Staging, error) {
	if g == nil || g.r != r {
		return nil, fmt.Errorf("%w: not a region of this registry", ErrBadRange)
	}
	if off < 0 || n <= 0 || off > g.n-n {
		return nil, fmt.Errorf("%w: [%d, +%d) of a region of %d bytes", ErrBadRange, off, n, g.n)
	}
	// The in-flight guard first, then the region's state. The other order
	// leaves a gap in which the whole gate, drain and unmap can run.
	if !g.flight.enter() {
		if r.Draining() {
			return nil, ErrShutdown
		}
		return nil, ErrDeregistered
	}
	g.gate.RLock()
	dead := g.dead
	g.gate.RUnlock()
	if dead {
		g.flight.exit()
		return nil, ErrDeregistered
	}
	return newStaging(r, alloc{}, g, unsafe.Add(g.base, off), n), nil
}

// Len is the registered length (as the caller gave it).
func (g *RegionGuard) Len() int { return g.n }

// EffectiveRange is what the backend pinned: whole pages around the
// registered range, all of it remotely readable and writable.
func (g *RegionGuard) EffectiveRange() (base uintptr, n int) { return g.mapping.EffectiveRange() }

// Deregistered is closed when the registration is gone: on a confirmed
// unmap (Unregister, or the shutdown sweep), or by AfterBackendClose. It
// is the only signal after which the caller may free the memory. A
// region whose unmap the backend refused stays open until
// AfterBackendClose, because its pages may still be pinned.
func (g *RegionGuard) Deregistered() <-chan struct{} { return g.dereg }

func (g *RegionGuard) closeDereg() { g.deregOnce.Do(func() { close(g.dereg) }) }

// Unregister gates new stagings in the region, waits up to timeout for
// the in-flight ones (stagings not yet released, copies in progress),
// latches the copy gate and unmaps. Drained or DrainTimedOut both mean
// the unmap went ahead; a non-nil error means the backend refused it and
// the memory must not be freed. A second call, or one racing Shutdown,
// waits for the first and returns its outcome.
func (g *RegionGuard) Unregister(timeout time.Duration) (DrainResult, error) {
	r := g.r
	r.mu.Lock()
	mine := g.state == stateLive
	if mine {
		g.state = stateUnmapping
	}
	r.mu.Unlock()
	if !mine {
		<-g.done
		return g.result, g.err
	}
	g.flight.close()
	res := Drained
	if !r.waitRegion(g, timeout) {
		res = DrainTimedOut
		r.log.Warn("rdma: region unregistered with work in flight", "bytes", g.n, "timeout", timeout)
	}
	return res, r.retireRegion(g, res)
}

// UnregisterOwned is Unregister for a RegisterOwned guard, and gives the
// buffer back once the unmap is confirmed (nil if the backend refused it:
// the registry keeps it, as it may still be pinned).
func (g *RegionGuard) UnregisterOwned(timeout time.Duration) ([]byte, DrainResult, error) {
	if g.owned == nil {
		return nil, Drained, ErrNotOwned
	}
	res, err := g.Unregister(timeout)
	if err != nil {
		return nil, res, err
	}
	return g.owned, res, nil
}

// Drop is for a guard the caller gives up without Unregister: it starts
// the unregistration in the background, bounded by DropDeregTimeout, logs
// a warning and returns at once. The memory stays registered until that
// finishes; wait for Deregistered before freeing it.
func (g *RegionGuard) Drop() {
	r := g.r
	r.mu.Lock()
	if g.state != stateLive || r.swept {
		r.mu.Unlock()
		return
	}
	r.bg.Add(1)
	r.mu.Unlock()
	r.log.Warn("rdma: region guard dropped without Unregister; deregistering in the background", "bytes", g.n)
	go func() {
		defer r.bg.Done()
		_, _ = g.Unregister(r.cfg.DropDeregTimeout)
	}()
}

// Watch returns a view of the guard's observers that does not carry its
// release (for code that must see the region end but not end it).
func (g *RegionGuard) Watch() *RegionWatch { return &RegionWatch{g: g} }

// RegionWatch observes a region; see RegionGuard.Watch.
type RegionWatch struct{ g *RegionGuard }

// Deregistered is the guard's Deregistered.
func (w *RegionWatch) Deregistered() <-chan struct{} { return w.g.dereg }

// EffectiveRange is the guard's EffectiveRange.
func (w *RegionWatch) EffectiveRange() (uintptr, int) { return w.g.EffectiveRange() }

// Len is the guard's Len.
func (w *RegionWatch) Len() int { return w.g.n }

// waitRegion waits for g's in-flight work, up to timeout or until the
// shutdown sweep forces it.
func (r *Registry) waitRegion(g *RegionGuard, timeout time.Duration) bool {
	t := time.NewTimer(max(timeout, 0))
	defer t.Stop()
	select {
	case <-g.flight.zeroCh:
		return true
	case <-r.forced:
	case <-t.C:
	}
	select { // zero and the deadline at once: zero wins
	case <-g.flight.zeroCh:
		return true
	default:
		return false
	}
}

// retireRegion latches the claimed region and unmaps it. On a confirmed
// unmap it closes Deregistered and unpins an owned buffer; on a refusal
// it keeps both, and the region, as leaked.
func (r *Registry) retireRegion(g *RegionGuard, res DrainResult) error {
	if h := r.latchHook; h != nil {
		h()
	}
	g.latch()
	err := g.mapping.Unmap()
	r.mu.Lock()
	g.state = stateGone
	delete(r.regions, g)
	if err == nil {
		r.accountLocked(-g.pinned, -1)
	} else {
		r.leakedRegions = append(r.leakedRegions, g)
	}
	r.mu.Unlock()
	if err == nil {
		if g.pin != nil {
			g.pin.Unpin()
		}
		g.closeDereg()
	} else {
		r.log.Error("rdma: the backend refused to unmap a region; it stays registered and held", "bytes", g.n, "err", err)
		err = fmt.Errorf("rdma: unmap of a region of %d bytes: %w", g.n, err)
	}
	g.result, g.err = res, err
	close(g.done)
	return err
}

// copyOut copies len(dst) bytes from src, inside the region, one chunk
// at a time under the copy gate.
func (g *RegionGuard) copyOut(dst []byte, src unsafe.Pointer) (int, error) {
	done := 0
	for done < len(dst) {
		k := min(copyChunk, len(dst)-done)
		g.gate.RLock()
		if g.dead {
			g.gate.RUnlock()
			return done, ErrDeregistered
		}
		if h := g.r.copyHook; h != nil {
			h()
		}
		copy(dst[done:done+k], unsafe.Slice((*byte)(unsafe.Add(src, done)), k))
		g.gate.RUnlock()
		done += k
	}
	return done, nil
}
