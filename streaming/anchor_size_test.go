package streaming

import (
	"testing"
	"unsafe"
)

// An unattached anchor is one allocation of Anchor[T] (inlet.State and the
// decoder). It fits the allocator's 192-byte size class; a field that
// pushes it past costs every held anchor 16 bytes or more. A field that
// few anchors use belongs in anchorExtra.
func TestAnchorFitsItsSizeClass(t *testing.T) {
	const sizeClass = 192
	if got := unsafe.Sizeof(Anchor[[]byte]{}); got > sizeClass {
		t.Fatalf("Anchor[[]byte] is %d bytes, want at most %d (move rarely used fields to anchorExtra)", got, sizeClass)
	}
}
