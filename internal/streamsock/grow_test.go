package streamsock

import (
	"testing"

	"github.com/velo-go/velo/ext"
	"github.com/velo-go/velo/internal/frame"
)

// A coalescing buffer that fills to a whole segment with frames of a mux
// response plane's size (40 KiB batches) grows in two steps from
// takeFree's 64 KiB (256 KiB, then a whole segment), not by append's
// quarter steps (a dozen copies and allocations). One that stays under
// 256 KiB grows once, to 256 KiB, not to a whole segment's size (over
// 1 MiB allocated and cleared).
func TestSegmentGrowsInTwoSteps(t *testing.T) {
	f := ext.Frame{Type: ext.Message, Header: make([]byte, 32), Payload: make([]byte, 40<<10)}
	fill := func(upTo int) (grows, allocated int, buf []byte) {
		buf = make([]byte, 0, 64<<10)
		for len(buf) < upTo {
			c := cap(buf)
			buf = frame.Append(growSegment(buf, f.Len()), f)
			if cap(buf) != c {
				grows++
				allocated += cap(buf)
			}
		}
		return grows, allocated, buf
	}
	grows, allocated, buf := fill(maxBatchBytes)
	if grows != 2 || allocated > cap(buf)+256<<10 {
		t.Fatalf("the buffer grew %d times and allocated %d bytes on its way to %d, want twice and at most 256 KiB more", grows, allocated, len(buf))
	}
	if cap(buf) > 4*maxBatchBytes {
		t.Fatalf("the grown buffer holds %d bytes, more than recycleLocked keeps", cap(buf))
	}
	grows, allocated, buf = fill(100 << 10)
	if grows != 1 || allocated > 256<<10 {
		t.Fatalf("a buffer that took %d bytes grew %d times and allocated %d bytes, want once and 256 KiB", len(buf), grows, allocated)
	}
}
