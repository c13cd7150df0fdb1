package streamsock

import (
	"testing"

	"github.com/velo-go/velo/ext"
	"github.com/velo-go/velo/internal/frame"
)

// A coalescing buffer that fills to a whole segment with frames of a mux
// response plane's size (40 KiB batches) grows once, straight to the
// most a segment holds, not by append's quarter steps (a dozen copies
// and allocations from takeFree's 64 KiB).
func TestSegmentGrowsOnce(t *testing.T) {
	f := ext.Frame{Type: ext.Message, Header: make([]byte, 32), Payload: make([]byte, 40<<10)}
	buf := make([]byte, 0, 64<<10)
	grows := 0
	for len(buf) < maxBatchBytes {
		c := cap(buf)
		buf = frame.Append(growSegment(buf, f.Len()), f)
		if cap(buf) != c {
			grows++
		}
	}
	if grows != 1 {
		t.Fatalf("the buffer grew %d times on its way to %d bytes, want once", grows, len(buf))
	}
	if cap(buf) > 4*maxBatchBytes {
		t.Fatalf("the grown buffer holds %d bytes, more than recycleLocked keeps", cap(buf))
	}
}
