package streamsock

import (
	"testing"

	"github.com/velo-go/velo/ext"
)

// A frame that others follow (ext.Frame.Follows) and that finds the writer
// idle wakes the writer instead of being written on the sender's goroutine:
// written inline it would leave alone, and the frames behind it in a second
// write. A frame without the hint still goes inline. Fails if queued
// ignores Follows.
func TestFollowsWakesWriterInsteadOfInline(t *testing.T) {
	for _, follows := range []bool{false, true} {
		l := &lane{idle: true, inlineOK: true, wake: make(chan struct{}, 1)}
		l.acceptSmall(&ext.Frame{Type: ext.Response, Header: []byte("h"), Payload: []byte("p"), Follows: follows})
		woken := len(l.wake) == 1
		if claimed := l.claimed.Load(); claimed == follows || woken != follows {
			t.Errorf("Follows=%v: claimed for an inline write %v, writer woken %v; want claimed %v, woken %v",
				follows, claimed, woken, !follows, follows)
		}
		if l.idle {
			t.Errorf("Follows=%v: the lane still looks idle with a frame queued", follows)
		}
	}
}

// The writer yields before a take when the last frame queued said more
// follow (run): tailFollows is that frame's hint, set and cleared as
// frames are queued. Fails if queued does not keep it.
func TestTailFollowsIsTheLastFramesHint(t *testing.T) {
	l := &lane{wake: make(chan struct{}, 1)}
	for i, follows := range []bool{true, true, false, true, false} {
		l.acceptSmall(&ext.Frame{Type: ext.Response, Header: []byte("h"), Follows: follows})
		if got := l.tailFollows.Load(); got != follows {
			t.Fatalf("frame %d (Follows %v): tailFollows %v", i, follows, got)
		}
	}
}
