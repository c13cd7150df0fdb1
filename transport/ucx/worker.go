package ucx

import (
	"context"
	"unsafe"
)

// endpointID names one UCX endpoint of a worker. It mirrors
// internal/ucx.EndpointID so that everything above the cgo binding builds
// and is tested without cgo.
type endpointID uint64

// amWorker is what the transport needs of a UCX worker: internal/ucx's
// Worker (build tag ucx, adapted in worker_ucx.go), or an in-memory fake
// in the tests. Its rules are the binding's:
//
//   - Connect and Get wait for the worker's progress goroutine, so they are
//     never called from a handler or a done callback, which run on it.
//   - An AM handler's header and data are valid only during the call; it
//     copies what it keeps and must not block for long (see inbox.go).
//   - SendAM keeps header and data until done runs, exactly once, on the
//     progress goroutine; done must not block. When SendAM itself returns
//     an error, done is not called.
//   - OnEndpointError's callback runs off the progress goroutine.
type amWorker interface {
	Address() []byte
	Connect(addr []byte) (endpointID, error)
	CloseEndpoint(ep endpointID)
	OnEndpointError(fn func(ep endpointID, err error))
	SetAMHandler(id uint16, fn func(header, data []byte))
	SendAM(ep endpointID, id uint16, header, data []byte, done func(error)) error
	Map(base unsafe.Pointer, n int) (memMapping, error)
	Get(ctx context.Context, ep endpointID, remoteAddr uint64, rkey []byte, dst []byte) error
	Close() error
}

// memAllocator is an optional interface of a worker: memory it allocates
// and registers itself, freed by the mapping's Unmap.
type memAllocator interface {
	Alloc(n int) (unsafe.Pointer, memMapping, error)
}

// memMapping is one memory registration of a worker; it is the shape of
// rdma.Mapping, which it satisfies.
type memMapping interface {
	PackKey() ([]byte, error)
	EffectiveRange() (base uintptr, n int)
	Unmap() error
}

// amHeaderLimiter is an optional interface of a worker: the largest AM
// header UCX takes (ucp_worker_attr.max_am_header, 8101 bytes measured
// over TCP). The transport refuses a frame whose header would not fit
// before it reaches the wire.
type amHeaderLimiter interface {
	MaxAMHeader() int
}
