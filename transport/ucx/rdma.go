package ucx

import (
	"context"
	"fmt"
	"unsafe"

	"github.com/velo-go/velo/ext"
	"github.com/velo-go/velo/internal/rdma"
)

// RDMA is the transport's backend for the rendezvous RDMA path: memory
// registration on this transport's worker, and one-sided GETs through the
// owner's endpoint (created if needed). A GET keeps the endpoint from
// the idle reaper until it completes.
// With WithAllocatedArenas the registry's arenas are memory UCX allocates
// (the backend is an rdma.Allocator).
func (t *Transport) RDMA() rdma.Backend {
	if _, ok := t.w.(memAllocator); ok && t.o.allocArenas {
		return allocBackend{rdmaBackend{t}}
	}
	return rdmaBackend{t}
}

type rdmaBackend struct{ t *Transport }

// allocBackend is rdmaBackend over a worker that allocates memory.
type allocBackend struct{ rdmaBackend }

// Alloc allocates and registers n bytes with the worker; the mapping's
// Unmap frees them.
func (b allocBackend) Alloc(n int) (unsafe.Pointer, rdma.Mapping, error) {
	base, m, err := b.t.w.(memAllocator).Alloc(n)
	if err != nil {
		return nil, nil, fmt.Errorf("ucx: allocate %d bytes: %w", n, err)
	}
	return base, m, nil
}

// Name is "ucx", the transport's key.
func (b rdmaBackend) Name() string { return string(Key) }

// Map registers n bytes at base with the worker.
func (b rdmaBackend) Map(base unsafe.Pointer, n int) (rdma.Mapping, error) {
	m, err := b.t.w.Map(base, n)
	if err != nil {
		return nil, fmt.Errorf("ucx: map %d bytes: %w", n, err)
	}
	return m, nil
}

// Reachable reports whether owner is registered on this transport.
func (b rdmaBackend) Reachable(owner ext.WorkerID) bool {
	t := b.t
	t.mu.RLock()
	defer t.mu.RUnlock()
	return t.byWorker[owner] != nil
}

// Get reads len(dst) bytes at addr of owner's memory into dst. Every
// failure matches rdma.ErrGetFailed. When ctx ends first, Get returns
// (the error also matches ctx.Err()), but the GET itself cannot be
// recalled: UCX may write dst until it completes or the transport shuts
// down, so the caller must not reuse dst after such an error.
func (b rdmaBackend) Get(ctx context.Context, owner ext.WorkerID, addr uint64, rkey []byte, dst []byte) error {
	t := b.t
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("%w: %w", rdma.ErrGetFailed, err)
	}
	t.mu.RLock()
	p := t.byWorker[owner]
	t.mu.RUnlock()
	if p == nil {
		return fmt.Errorf("%w: owner %v is not registered on ucx: %w", rdma.ErrGetFailed, owner, ext.ErrPeerNotRegistered)
	}
	if t.core.Closing() {
		return fmt.Errorf("%w: %w", rdma.ErrGetFailed, ext.ErrTransportClosed)
	}
	r, err := p.link.acquire(0, 1)
	if err != nil {
		return fmt.Errorf("%w: %w", rdma.ErrGetFailed, err)
	}
	if ctx.Done() == nil { // nothing to watch (rendezvous passes such a ctx): wait here
		err := t.w.Get(ctx, r.id, addr, rkey, dst)
		r.getDone()
		if err != nil {
			return fmt.Errorf("%w: from %v: %w", rdma.ErrGetFailed, p.id, err)
		}
		return nil
	}
	// The worker's Get would abandon its wait at ctx's end, and then the
	// reaper could not know when the GET completed: so it waits for the
	// completion here, and the caller's ctx is watched beside it.
	res := make(chan error, 1)
	go func() {
		err := t.w.Get(context.WithoutCancel(ctx), r.id, addr, rkey, dst)
		r.getDone()
		res <- err
	}()
	select {
	case err := <-res:
		if err != nil {
			return fmt.Errorf("%w: from %v: %w", rdma.ErrGetFailed, p.id, err)
		}
		return nil
	case <-ctx.Done():
		return fmt.Errorf("%w: abandoned, the GET runs on: %w", rdma.ErrGetFailed, ctx.Err())
	}
}
