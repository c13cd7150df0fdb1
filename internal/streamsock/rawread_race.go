//go:build linux && race

package streamsock

import (
	"runtime"
	"syscall"
	"unsafe"
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
