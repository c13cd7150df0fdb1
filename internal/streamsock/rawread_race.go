//go:build linux && race

package streamsock

import (
	"runtime"
	"syscall"
	"unsafe"

	"golang.org/x/sys/unix"
)

// raceRead tells the race detector what a raw read did, as the syscall
// package's read does: p was written, and the read comes after every
// earlier write to a descriptor (a zero-byte read through package syscall
// carries that edge, which a raw call cannot reach).
func raceRead(fd uintptr, p []byte) {
	syscall.Read(int(fd), p[:0])
	runtime.RaceWriteRange(unsafe.Pointer(&p[0]), len(p))
}

// raceBuild says the race detector is on.
const raceBuild = true

// raceWrite tells the race detector what a raw write will do, as package
// unix's write does: p is read, and the write comes after what the writer
// did before (a zero-byte write through package unix releases that edge).
func raceWrite(fd uintptr, p []byte) {
	unix.Write(int(fd), p[:0])
	runtime.RaceReadRange(unsafe.Pointer(&p[0]), len(p))
}
