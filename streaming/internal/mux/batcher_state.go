package mux

import (
	"fmt"
	"log/slog"
	"sync/atomic"
)

// BatcherState is where a batcher is in its life. Each state answers the
// questions the code used to answer by combining booleans (may it write,
// do its replies go to a successor, did its goroutine stop); the legal
// moves are listed once, in batcherMoves, and to checks every move
// against that list.
//
// What stays a boolean on the batcher is not lifecycle: awake (a pass is
// running), lingerOn / lingered / windowArmed / windowDue (timers that
// come and go many times in any state), used (a flag the idle check
// resets) and writing (who owns the lane's writes right now).
type BatcherState uint8

const (
	// BatcherLive is the lane's current batcher: it writes everything.
	BatcherLive BatcherState = iota
	// BatcherSuperseded: eviction took it out of the mux. A successor may
	// write on the lane, so it writes nothing; replies go to the successor.
	BatcherSuperseded
	// BatcherLost: peer loss (or a peer with no route) took it out. It
	// writes nothing, and replies for the peer are dropped.
	BatcherLost
	// BatcherRetired: the mux's close took it. No successor follows, so it
	// still writes, and is the one writer of its lane's last batches.
	BatcherRetired
	// BatcherClosing: its goodbye ran. It writes only closes and the
	// notices of attaches answered too late.
	BatcherClosing
	// The stopped states: the goroutine ended (stop).
	BatcherHalted      // stopped while live (no successor named): writes nothing
	BatcherEvicted     // stopped after batcherSuperseded
	BatcherLostStopped // stopped after batcherLost
	BatcherClosed      // stopped after batcherClosing: late closes still go
	BatcherStates      // the count, for the transition table
)

var batcherStateNames = [BatcherStates]string{
	"live", "superseded", "lost", "retired", "closing", "halted", "evicted", "lost-stopped", "closed",
}

func (s BatcherState) String() string {
	if s < BatcherStates {
		return batcherStateNames[s]
	}
	return fmt.Sprintf("BatcherState(%d)", uint8(s))
}

// BatcherMoves is every legal move, from → to.
var BatcherMoves = [BatcherStates][]BatcherState{
	BatcherLive:       {BatcherSuperseded, BatcherLost, BatcherRetired, BatcherHalted},
	BatcherSuperseded: {BatcherEvicted},
	BatcherLost:       {BatcherLostStopped},
	BatcherRetired:    {BatcherClosing},
	BatcherClosing:    {BatcherClosed},
}

// StoppedState is where stop moves each state: every state has one, and
// the stopped states stay where they are.
var StoppedState = [BatcherStates]BatcherState{
	BatcherLive:        BatcherHalted,
	BatcherSuperseded:  BatcherEvicted,
	BatcherLost:        BatcherLostStopped,
	BatcherRetired:     BatcherClosed, // not reached: the goodbye runs before the stop
	BatcherClosing:     BatcherClosed,
	BatcherHalted:      BatcherHalted,
	BatcherEvicted:     BatcherEvicted,
	BatcherLostStopped: BatcherLostStopped,
	BatcherClosed:      BatcherClosed,
}

func (s BatcherState) Legal(next BatcherState) bool {
	if s >= BatcherStates {
		return false
	}
	for _, n := range BatcherMoves[s] {
		if n == next {
			return true
		}
	}
	return false
}

// To moves s to next. An illegal move is reported (illegalTransition) and
// made all the same: the nearest the code comes to what it meant.
func (s *BatcherState) To(next BatcherState) {
	if !s.Legal(next) {
		illegalTransition("batcher", s.String(), next.String())
	}
	*s = next
}

// MayWrite says whether the batcher may still post. One taken out of the
// mux (or stopped while live) may not: a refused batch or its stop moves
// it to an epoch newer than a successor's on the same lane, and the peer
// would retire that successor's streams. One the mux's close retired may:
// no successor comes after it.
func (s BatcherState) MayWrite() bool {
	switch s {
	case BatcherLive, BatcherRetired, BatcherClosing, BatcherClosed:
		return true
	}
	return false
}

// HandsOn says whether replies for the peer go to the lane's current
// batcher instead (or nowhere, after peer loss).
func (s BatcherState) HandsOn() bool {
	switch s {
	case BatcherSuperseded, BatcherLost, BatcherEvicted, BatcherLostStopped:
		return true
	}
	return false
}

// DropsReplies says whether peer loss took the batcher: replies for the
// peer are dropped, not handed on.
func (s BatcherState) DropsReplies() bool { return s == BatcherLost || s == BatcherLostStopped }

// Stopped says whether the goroutine ended.
func (s BatcherState) Stopped() bool { return StoppedState[s] == s }

// SaidGoodbye says the goodbye ran: nothing but closes and late notices
// may follow it, and an attach answered now fails its slot.
func (s BatcherState) SaidGoodbye() bool { return s == BatcherClosing || s == BatcherClosed }

// BuildsData says whether a pass may build batches of queued work.
func (s BatcherState) BuildsData() bool {
	return s == BatcherLive || s == BatcherRetired || s == BatcherHalted
}

// IllegalTransitions counts illegal lifecycle moves in this process.
var IllegalTransitions atomic.Uint64

// OnIllegalTransition is told of every illegal lifecycle move. Outside
// tests it logs; the tests set it to fail the test that made the move.
var OnIllegalTransition = func(kind, from, to string) {
	slog.Default().Error("velo: illegal mux lifecycle move", "kind", kind, "from", from, "to", to)
}

func illegalTransition(kind, from, to string) {
	IllegalTransitions.Add(1)
	OnIllegalTransition(kind, from, to)
}
