//go:build !go1.27

package rendezvous

import "unsafe"

// A fetch destination is written whole before anyone sees it: Get and
// Fetch give a buffer only once every chunk, each of its exact length, is
// in it (sink.bytes), and the RDMA and local paths copy all n bytes in
// before they return it. So the zeroing that make does is wasted: on a
// 64 MiB Get it cleared 64 MiB of memory that the socket read overwrote
// at once, about a tenth of the Get's CPU (runtime.memclrNoHeapPointers
// in the profile). makeUncleared skips it.
//
// runtime.mallocgc is one of the runtime functions that widely used
// modules reach by linkname (go.dev/issue/67401), and the runtime keeps
// it reachable for them on purpose (its //go:linkname mallocgc). A nil
// type allocates memory without pointers, which the collector never
// scans, so stale bytes in it are only bytes. The linker checks the
// name, not the signature, so this file builds only with the Go release
// it was checked against (1.26); a newer one takes nozero_other.go, which
// clears, until someone checks mallocgc there and moves the bound.
//
//go:linkname mallocgc runtime.mallocgc
func mallocgc(size uintptr, typ unsafe.Pointer, needzero bool) unsafe.Pointer

// unclearedDestinations says this build skips the clear (a test seam).
const unclearedDestinations = true

// makeUncleared returns a slice of length 0 and capacity n whose bytes
// hold whatever the memory held before. The caller must write every byte
// it later hands out.
func makeUncleared(n int) []byte {
	if n == 0 {
		return []byte{}
	}
	p := mallocgc(uintptr(n), nil, false)
	return unsafe.Slice((*byte)(p), n)[:0:n]
}
