package messenger

import (
	"time"

	"github.com/velo-go/velo/internal/msgwire"
)

// shutdownAnswerCap bounds how long the calls to a peer that shut down in
// order wait for answers that keep coming (failWhenQuiet).
const shutdownAnswerCap = 2 * time.Second

// failWhenQuiet runs fail once the answers of a peer that shut down in
// order have stopped coming. Its answers travel on its own connection to
// this node, which may trail the end of ours, and a busy node may take a
// while to read a burst of them (a thousand answers written just before
// the goodbye). So every PeerShutdownGrace it counts the calls still
// waiting (pending): while that count goes down it waits again, up to
// shutdownAnswerCap in all; once a grace passes with no answer, fail runs.
// A fixed grace failed answers that had already arrived and were not yet
// read.
func failWhenQuiet(pending func() int, fail func()) {
	deadline := time.Now().Add(shutdownAnswerCap)
	last := pending()
	var check func()
	check = func() {
		n := pending()
		if n > 0 && n < last && time.Now().Before(deadline) {
			last = n
			time.AfterFunc(msgwire.PeerShutdownGrace, check)
			return
		}
		fail()
	}
	time.AfterFunc(msgwire.PeerShutdownGrace, check)
}
