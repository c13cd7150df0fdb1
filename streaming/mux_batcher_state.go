package streaming

import (
	"fmt"
	"log/slog"
	"sync/atomic"
)

// batcherState is where a batcher is in its life. Each state answers the
// questions the code used to answer by combining booleans (may it write,
// do its replies go to a successor, did its goroutine stop); the legal
// moves are listed once, in batcherMoves, and to checks every move
// against that list.
//
// What stays a boolean on the batcher is not lifecycle: awake (a pass is
// running), lingerOn / lingered / windowArmed / windowDue (timers that
// come and go many times in any state), used (a flag the idle check
// resets) and writing (who owns the lane's writes right now).
type batcherState uint8

const (
	// batcherLive is the lane's current batcher: it writes everything.
	batcherLive batcherState = iota
	// batcherSuperseded: eviction took it out of the mux. A successor may
	// write on the lane, so it writes nothing; replies go to the successor.
	batcherSuperseded
	// batcherLost: peer loss (or a peer with no route) took it out. It
	// writes nothing, and replies for the peer are dropped.
	batcherLost
	// batcherRetired: the mux's close took it. No successor follows, so it
	// still writes, and is the one writer of its lane's last batches.
	batcherRetired
	// batcherClosing: its goodbye ran. It writes only closes and the
	// notices of attaches answered too late.
	batcherClosing
	// The stopped states: the goroutine ended (stop).
	batcherHalted      // stopped while live (no successor named): writes nothing
	batcherEvicted     // stopped after batcherSuperseded
	batcherLostStopped // stopped after batcherLost
	batcherClosed      // stopped after batcherClosing: late closes still go
	batcherStates      // the count, for the transition table
)

var batcherStateNames = [batcherStates]string{
	"live", "superseded", "lost", "retired", "closing", "halted", "evicted", "lost-stopped", "closed",
}

func (s batcherState) String() string {
	if s < batcherStates {
		return batcherStateNames[s]
	}
	return fmt.Sprintf("batcherState(%d)", uint8(s))
}

// batcherMoves is every legal move, from → to.
var batcherMoves = [batcherStates][]batcherState{
	batcherLive:       {batcherSuperseded, batcherLost, batcherRetired, batcherHalted},
	batcherSuperseded: {batcherEvicted},
	batcherLost:       {batcherLostStopped},
	batcherRetired:    {batcherClosing},
	batcherClosing:    {batcherClosed},
}

// stoppedState is where stop moves each state: every state has one, and
// the stopped states stay where they are.
var stoppedState = [batcherStates]batcherState{
	batcherLive:        batcherHalted,
	batcherSuperseded:  batcherEvicted,
	batcherLost:        batcherLostStopped,
	batcherRetired:     batcherClosed, // not reached: the goodbye runs before the stop
	batcherClosing:     batcherClosed,
	batcherHalted:      batcherHalted,
	batcherEvicted:     batcherEvicted,
	batcherLostStopped: batcherLostStopped,
	batcherClosed:      batcherClosed,
}

func (s batcherState) legal(next batcherState) bool {
	if s >= batcherStates {
		return false
	}
	for _, n := range batcherMoves[s] {
		if n == next {
			return true
		}
	}
	return false
}

// to moves s to next. An illegal move is reported (illegalTransition) and
// made all the same: the nearest the code comes to what it meant.
func (s *batcherState) to(next batcherState) {
	if !s.legal(next) {
		illegalTransition("batcher", s.String(), next.String())
	}
	*s = next
}

// mayWrite says whether the batcher may still post. One taken out of the
// mux (or stopped while live) may not: a refused batch or its stop moves
// it to an epoch newer than a successor's on the same lane, and the peer
// would retire that successor's streams. One the mux's close retired may:
// no successor comes after it.
func (s batcherState) mayWrite() bool {
	switch s {
	case batcherLive, batcherRetired, batcherClosing, batcherClosed:
		return true
	}
	return false
}

// handsOn says whether replies for the peer go to the lane's current
// batcher instead (or nowhere, after peer loss).
func (s batcherState) handsOn() bool {
	switch s {
	case batcherSuperseded, batcherLost, batcherEvicted, batcherLostStopped:
		return true
	}
	return false
}

// dropsReplies says whether peer loss took the batcher: replies for the
// peer are dropped, not handed on.
func (s batcherState) dropsReplies() bool { return s == batcherLost || s == batcherLostStopped }

// stopped says whether the goroutine ended.
func (s batcherState) stopped() bool { return stoppedState[s] == s }

// saidGoodbye says the goodbye ran: nothing but closes and late notices
// may follow it, and an attach answered now fails its slot.
func (s batcherState) saidGoodbye() bool { return s == batcherClosing || s == batcherClosed }

// buildsData says whether a pass may build batches of queued work.
func (s batcherState) buildsData() bool {
	return s == batcherLive || s == batcherRetired || s == batcherHalted
}

// illegalTransitions counts illegal lifecycle moves in this process.
var illegalTransitions atomic.Uint64

// onIllegalTransition is told of every illegal lifecycle move. Outside
// tests it logs; the tests set it to fail the test that made the move.
var onIllegalTransition = func(kind, from, to string) {
	slog.Default().Error("velo: illegal mux lifecycle move", "kind", kind, "from", from, "to", to)
}

func illegalTransition(kind, from, to string) {
	illegalTransitions.Add(1)
	onIllegalTransition(kind, from, to)
}
