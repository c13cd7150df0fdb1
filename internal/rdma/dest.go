package rdma

import (
	"sync/atomic"
	"unsafe"

	"github.com/velo-go/velo/metrics"
)

// AllocDest reserves n bytes of pool memory as a GET destination, mapping
// an arena when none has room. Errors: ErrBadRange (n <= 0), ErrBudget,
// ErrPoolExhausted, ErrShutdown.
func (r *Registry) AllocDest(n int) (*PinnedBuf, error) {
	if n <= 0 {
		return nil, ErrBadRange
	}
	if r.b == nil {
		return nil, ErrPoolExhausted
	}
	if !r.flight.enter() {
		return nil, ErrShutdown
	}
	defer r.flight.exit()
	al, why := r.allocPool(n, true)
	switch why {
	case metrics.RdmaOK:
		return &PinnedBuf{r: r, al: al, n: n}, nil
	case metrics.RdmaBudget:
		return nil, ErrBudget
	case metrics.RdmaDraining:
		return nil, ErrShutdown
	default:
		return nil, ErrPoolExhausted
	}
}

// PinnedBuf is pool memory held for a GET destination. Its pages stay
// the process's until Release, even across Shutdown (which only ends
// their registration).
type PinnedBuf struct {
	r        *Registry
	al       alloc
	n        int
	released atomic.Bool
}

// Bytes is the buffer; nil after Release. Registered memory is remotely
// writable: treat its contents as untrusted until a GET into it completed.
func (p *PinnedBuf) Bytes() []byte {
	if p == nil || p.released.Load() {
		return nil
	}
	return unsafe.Slice((*byte)(p.al.ptr()), p.n)
}

// Release returns the buffer to the pool. It is idempotent. The caller
// must not release while a GET into the buffer may still be running.
func (p *PinnedBuf) Release() {
	if p != nil && p.released.CompareAndSwap(false, true) {
		p.r.free(p.al)
	}
}
