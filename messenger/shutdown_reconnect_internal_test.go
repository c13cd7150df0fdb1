package messenger

import (
	"testing"
	"testing/synctest"
	"time"

	"github.com/velo-go/velo/internal/msgwire"
)

// A connection is known to carry a peer's answers only once its first
// answer was read. So "every known connection of the peer ended" does not
// mean every answer was read: the peer may have redialled (its first
// connection broke) or opened another lane, and the first answer on that
// new connection may still be unread when the goodbye comes. Those calls
// ran; failing them at once as refused (ErrShuttingDown) tells their
// callers a retry is safe.
func TestGoodbyeAfterReconnectWaitsForTheNewConnection(t *testing.T) {
	// The first connection ended before the goodbye was read.
	synctest.Test(t, func(t *testing.T) {
		b := newGoodbyeBench(t, "a", "b", "c")
		b.answer("a", 7)
		b.wantAnswered("a")
		b.m.onConnClosed(7) // it broke; the peer redials as connection 9
		b.lost(true)        // the goodbye, read before connection 9's first answer
		b.wantWaiting("b")
		time.Sleep(msgwire.PeerShutdownGrace / 5)
		b.answer("b", 9)
		b.wantAnswered("b")
		b.m.onConnClosed(9)
		time.Sleep(2 * msgwire.PeerShutdownGrace) // the quiet wait began at the goodbye
		b.wantRefused("c")
	})
	// A second connection of the peer carries its first answer while the
	// only known one ends.
	synctest.Test(t, func(t *testing.T) {
		b := newGoodbyeBench(t, "a", "b", "c", "d")
		b.answer("a", 7)
		b.wantAnswered("a")
		b.lost(true)
		b.m.onConnClosed(7)
		b.wantWaiting("b")
		time.Sleep(msgwire.PeerShutdownGrace / 5)
		b.answer("b", 9) // connection 9 is known from here on
		b.wantAnswered("b")
		time.Sleep(3 * msgwire.PeerShutdownGrace) // quiet, but 9 is open
		b.wantWaiting("c")
		b.answer("c", 9)
		b.wantAnswered("c")
		b.m.onConnClosed(9)
		time.Sleep(msgwire.PeerShutdownGrace)
		b.wantRefused("d")
	})
}
