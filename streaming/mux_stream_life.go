package streaming

import "fmt"

// streamLife is where an outSlot's stream is in its life: whether its
// terminal was queued (the application ended it) and whether the slot is
// gone (terminal written, refused, epoch death, the consumer's close).
// The two used to be booleans set apart; the moves are listed once, in
// streamLifeMoves, and checked as the batcher's are.
//
// What stays outside it, and why: pending (the owner's answer to a
// pipelined attach is awaited) is about the attach, not the stream, and
// a stream may end or close while it lasts; cancelled and stopped are the
// consumer's signals, which fire channels and can come to a live stream
// that goes on; inReady, active and flushable belong to the batcher's
// scheduling.
type streamLife uint8

const (
	slotLive    streamLife = iota // accepts records
	slotEnding                    // its terminal is queued: nothing more is accepted
	slotClosed                    // gone before the application ended it
	slotEnded                     // gone, and ended by the application (its terminal written, or queued on a closed slot)
	streamLives                   // the count, for the transition table
)

var streamLifeNames = [streamLives]string{"live", "ending", "closed", "ended"}

func (s streamLife) String() string {
	if s < streamLives {
		return streamLifeNames[s]
	}
	return fmt.Sprintf("streamLife(%d)", uint8(s))
}

// streamLifeMoves is every legal move, from → to.
var streamLifeMoves = [streamLives][]streamLife{
	slotLive:   {slotEnding, slotClosed},
	slotEnding: {slotEnded},
	slotClosed: {slotEnded},
}

func (s streamLife) legal(next streamLife) bool {
	if s >= streamLives {
		return false
	}
	for _, n := range streamLifeMoves[s] {
		if n == next {
			return true
		}
	}
	return false
}

// to moves s to next; an illegal move is reported (illegalTransition) and
// made all the same.
func (s *streamLife) to(next streamLife) {
	if !s.legal(next) {
		illegalTransition("slot", s.String(), next.String())
	}
	*s = next
}

// terminal says the application ended the stream: sends fail with
// ErrSenderClosed.
func (s streamLife) terminal() bool { return s == slotEnding || s == slotEnded }

// closed says the slot is gone: its index is free, nothing more is written.
func (s streamLife) closed() bool { return s == slotClosed || s == slotEnded }

// end is the move of the application's terminal.
func (s *streamLife) end() {
	if s.closed() {
		s.to(slotEnded)
	} else {
		s.to(slotEnding)
	}
}

// close is the move of the slot going: ended when the application had
// ended it, closed otherwise.
func (s *streamLife) close() {
	if s.terminal() {
		s.to(slotEnded)
	} else {
		s.to(slotClosed)
	}
}
