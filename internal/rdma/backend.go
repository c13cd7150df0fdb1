// Package rdma is the registration layer of the rendezvous RDMA path: the
// memory a peer may read with a one-sided GET, and the backend (the UCX
// transport, or a fake in tests) that registers it and runs the GETs.
//
// It needs no cgo. The arena pool, the registered-bytes budget, external
// regions and their guards are written once here against Backend, so the
// rendezvous manager and its tests run the same code over UCX (build tag
// ucx) and over the in-process fake in package rdmatest.
package rdma

import (
	"context"
	"errors"
	"unsafe"

	"github.com/velo-go/velo/ext"
)

// Backend is an RDMA-capable transport's side of the path.
type Backend interface {
	// Name is the backend's name in an offer and the key of the transport
	// a peer must be registered on for this node to GET from it ("ucx").
	Name() string
	// Map registers n bytes at base so that a peer holding the packed key
	// can read them. The memory stays the caller's: it must stay valid
	// until Unmap returns.
	Map(base unsafe.Pointer, n int) (Mapping, error)
	// Reachable reports whether owner is registered on this backend's
	// transport here, the whole condition of a consumer's offer. It asks
	// the network nothing.
	Reachable(owner ext.WorkerID) bool
	// Get reads len(dst) bytes at addr of owner's memory, with the packed
	// key rkey, into dst. The key is unpacked for this GET only and
	// destroyed when it completes. A dead owner fails it with an error
	// that matches ErrGetFailed.
	Get(ctx context.Context, owner ext.WorkerID, addr uint64, rkey []byte, dst []byte) error
}

// Allocator is a Backend that can allocate registered memory itself. The
// registry takes its arenas from it when the backend has it: memory UCX
// allocates (UCP_MEM_MAP_ALLOCATE) is what its shared-memory transports
// can hand a peer on the same host to read directly, with no work on the
// owner's side, where memory it only registers is read by emulation
// through the owner's progress loop.
type Allocator interface {
	// Alloc allocates and registers n bytes. The Mapping's Unmap ends the
	// registration and frees the memory.
	Alloc(n int) (base unsafe.Pointer, m Mapping, err error)
}

// Mapping is one registration.
type Mapping interface {
	// PackKey packs a fresh remote key for one descriptor.
	PackKey() ([]byte, error)
	// EffectiveRange is what the backend pinned: whole pages around the
	// caller's range, all of it remotely readable and writable.
	EffectiveRange() (base uintptr, n int)
	// Unmap ends the registration.
	Unmap() error
}

// Errors of the layer.
var (
	// ErrGetFailed: a GET did not complete (a dead owner, a refused key).
	ErrGetFailed = errors.New("rdma: GET failed")
	// ErrShutdown: the registry has begun its shutdown sweep.
	ErrShutdown = errors.New("rdma: registry shutting down")
)
