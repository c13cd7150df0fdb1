package streamsock

import (
	"testing"
	"time"
)

// A ping-pong's sender comes back a round trip after its last inline
// write. One slow write (here 5 ms after writes of 1 ms, a round trip of
// 8 ms) must not make the next frame look like a stream's and go to the
// writer goroutine; a sender that comes back at once after writes of
// that cost still does. Fails if the lane compares with the last write's
// cost alone.
func TestInlineWorthItIgnoresOneSlowWrite(t *testing.T) {
	const ms = time.Millisecond
	l := &lane{}
	at := 100 * ms
	for range 3 {
		l.wroteInline(at, at+ms)
		at += 8 * ms
	}
	l.wroteInline(at, at+5*ms) // slowed
	if !l.inlineWorthItAt(at + 8*ms) {
		t.Fatalf("a round trip after one slow write (costs %v, last %v): not inline", l.inlineCost, l.lastCost)
	}
	if l.claimAt != at+8*ms {
		t.Fatalf("claimAt = %v, want the check's time %v", l.claimAt, at+8*ms)
	}
	// A stream: each frame comes right after the last write ended.
	l = &lane{}
	at = 100 * ms
	for range 3 {
		if at > 100*ms && l.inlineWorthItAt(at) {
			t.Fatalf("a frame right after a write of %v went inline", l.inlineCost)
		}
		l.wroteInline(at, at+ms)
		at += ms + 100*time.Microsecond
	}
	if l.inlineWorthItAt(at) {
		t.Fatal("a stream's next frame went inline")
	}
}
