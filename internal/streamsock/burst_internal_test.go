package streamsock

import (
	"testing"

	"github.com/velo-go/velo/ext"
)

// TestWriterBurstHoldsOffInlineWrites: once the writer goroutine has
// written several frames and parked, a send that finds it idle wakes it
// rather than write its one frame inline, for burstWindow; a writer's
// write of one frame (a lone sender's) leaves inline writes alone.
// Without the window, the first call of each round of 64 in flight wrote
// alone (4 writes in 10 carried one frame).
func TestWriterBurstHoldsOffInlineWrites(t *testing.T) {
	l := &lane{}
	l.gate = ext.NewAdmissionGate[outFrame](l, 1<<20)
	l.burstEnd = -burstWindow - 1 // no burst yet, however early the clock
	wrote := func(frames ...int) {
		var b batch
		for _, n := range frames {
			b.segs = append(b.segs, segment{buf: make([]byte, 8), frames: n})
		}
		l.take(&b) // the writer's next look, with the queue empty
		if !l.idle {
			t.Fatal("the writer should be idle with nothing queued")
		}
	}
	wrote(1)
	if !l.inlineWorthIt() {
		t.Error("after the writer wrote one frame, a send should write inline")
	}
	wrote(1, 1)
	if l.inlineWorthIt() {
		t.Error("right after the writer wrote two frames, a send should wake it, not write inline")
	}
	l.burstEnd -= burstWindow + 1 // as if burstWindow had passed
	if !l.inlineWorthIt() {
		t.Error("burstWindow after the writer's last burst, a send should write inline again")
	}
}
