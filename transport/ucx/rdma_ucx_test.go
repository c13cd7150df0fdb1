//go:build ucx

package ucx

import (
	"bytes"
	"context"
	"errors"
	"runtime"
	"testing"
	"time"
	"unsafe"

	"github.com/velo-go/velo/internal/rdma"
)

// A GET between two real transports of this process: the owner maps 1 MiB,
// the consumer reads a range of it through its endpoint to the owner
// (created by the GET), byte for byte. A key that does not frame as a
// packed key, and an owner that is gone, fail with rdma.ErrGetFailed.
func TestRDMAGetUCX(t *testing.T) {
	a := startNode(t, newReal(t))
	b := startNode(t, newReal(t))
	a.register(t, b)
	mem := make([]byte, 1<<20)
	for i := range mem {
		mem[i] = byte(i * 7)
	}
	m, err := b.tr.RDMA().Map(unsafe.Pointer(&mem[0]), len(mem))
	if err != nil {
		t.Fatal(err)
	}
	key, err := m.PackKey()
	if err != nil {
		t.Fatal(err)
	}
	be := a.tr.RDMA()
	if !be.Reachable(b.id.WorkerID()) {
		t.Fatal("a registered owner is not reachable")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	base := uint64(uintptr(unsafe.Pointer(&mem[0])))
	dst := make([]byte, 300<<10)
	if err := be.Get(ctx, b.id.WorkerID(), base+4096, key, dst); err != nil {
		t.Fatalf("GET: %v", err)
	}
	if !bytes.Equal(dst, mem[4096:4096+len(dst)]) {
		t.Fatal("the GET's bytes differ from the owner's")
	}
	if err := be.Get(ctx, b.id.WorkerID(), base, []byte{1, 2, 3}, dst); !errors.Is(err, rdma.ErrGetFailed) {
		t.Fatalf("a malformed key: %v", err)
	}
	if err := m.Unmap(); err != nil {
		t.Fatal(err)
	}
	runtime.KeepAlive(mem)
	b.tr.Shutdown()
	if err := be.Get(ctx, b.id.WorkerID(), base, key, dst); !errors.Is(err, rdma.ErrGetFailed) {
		t.Fatalf("a GET from an owner that shut down: %v", err)
	}
}

// With WithAllocatedArenas the backend allocates (rdma.Allocator) and
// without it it does not; memory it allocated is read by a peer's GET
// byte for byte, and its Unmap frees it.
func TestRDMAAllocatedArenasUCX(t *testing.T) {
	plain := newReal(t)
	_, allocates := plain.RDMA().(rdma.Allocator)
	plain.Shutdown()
	if allocates {
		t.Fatal("the backend allocates without WithAllocatedArenas")
	}
	a := startNode(t, newReal(t))
	b := startNode(t, newReal(t, WithAllocatedArenas()))
	a.register(t, b)
	al, ok := b.tr.RDMA().(rdma.Allocator)
	if !ok {
		t.Fatal("WithAllocatedArenas: the backend does not allocate")
	}
	const n = 1 << 20
	base, m, err := al.Alloc(n)
	if err != nil {
		t.Fatal(err)
	}
	mem := unsafe.Slice((*byte)(base), n)
	for i := range mem {
		mem[i] = byte(i * 13)
	}
	key, err := m.PackKey()
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	dst := make([]byte, n)
	if err := a.tr.RDMA().Get(ctx, b.id.WorkerID(), uint64(uintptr(base)), key, dst); err != nil {
		t.Fatalf("GET: %v", err)
	}
	if !bytes.Equal(dst, mem) {
		t.Fatal("the GET's bytes differ from the owner's")
	}
	if err := m.Unmap(); err != nil {
		t.Fatal(err)
	}
}
