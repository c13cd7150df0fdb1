package rdmatest

import (
	"fmt"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/velo-go/velo/internal/rdma"
)

// Allocating is a Backend that also allocates the memory it registers
// (rdma.Allocator), as UCX does for the registry's arenas. Its Unmap frees
// that memory at once, munmapped, so a registry that reads or lets a GET
// write an arena after its unmap faults instead of passing quietly.
type Allocating struct {
	*Backend
}

// Alloc mmaps n bytes and maps them; the mapping's Unmap munmaps them.
func (a Allocating) Alloc(n int) (unsafe.Pointer, rdma.Mapping, error) {
	mem, err := unix.Mmap(-1, 0, n, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_PRIVATE|unix.MAP_ANON)
	if err != nil {
		return nil, nil, fmt.Errorf("rdmatest: alloc of %d bytes: %w", n, err)
	}
	m, err := a.Map(unsafe.Pointer(&mem[0]), n)
	if err != nil {
		_ = unix.Munmap(mem)
		return nil, nil, err
	}
	return unsafe.Pointer(&mem[0]), freeing{m, mem}, nil
}

// freeing is a mapping whose Unmap frees its memory.
type freeing struct {
	rdma.Mapping
	mem []byte
}

func (f freeing) Unmap() error {
	if err := f.Mapping.Unmap(); err != nil {
		return err
	}
	return unix.Munmap(f.mem)
}
