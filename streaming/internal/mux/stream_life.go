package mux

import "fmt"

// StreamLife is where an OutSlot's stream is in its life: whether its
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
type StreamLife uint8

const (
	SlotLive    StreamLife = iota // accepts records
	SlotEnding                    // its terminal is queued: nothing more is accepted
	SlotClosed                    // gone before the application ended it
	SlotEnded                     // gone, and ended by the application (its terminal written, or queued on a closed slot)
	StreamLives                   // the count, for the transition table
)

var streamLifeNames = [StreamLives]string{"live", "ending", "closed", "ended"}

func (s StreamLife) String() string {
	if s < StreamLives {
		return streamLifeNames[s]
	}
	return fmt.Sprintf("StreamLife(%d)", uint8(s))
}

// StreamLifeMoves is every legal move, from → to.
var StreamLifeMoves = [StreamLives][]StreamLife{
	SlotLive:   {SlotEnding, SlotClosed},
	SlotEnding: {SlotEnded},
	SlotClosed: {SlotEnded},
}

func (s StreamLife) legal(next StreamLife) bool {
	if s >= StreamLives {
		return false
	}
	for _, n := range StreamLifeMoves[s] {
		if n == next {
			return true
		}
	}
	return false
}

// To moves s to next; an illegal move is reported (illegalTransition) and
// made all the same.
func (s *StreamLife) To(next StreamLife) {
	if !s.legal(next) {
		illegalTransition("slot", s.String(), next.String())
	}
	*s = next
}

// Terminal says the application ended the stream: sends fail with
// ErrSenderClosed.
func (s StreamLife) Terminal() bool { return s == SlotEnding || s == SlotEnded }

// Closed says the slot is gone: its index is free, nothing more is written.
func (s StreamLife) Closed() bool { return s == SlotClosed || s == SlotEnded }

// End is the move of the application's terminal.
func (s *StreamLife) End() {
	if s.Closed() {
		s.To(SlotEnded)
	} else {
		s.To(SlotEnding)
	}
}

// Close is the move of the slot going: ended when the application had
// ended it, closed otherwise.
func (s *StreamLife) Close() {
	if s.Terminal() {
		s.To(SlotEnded)
	} else {
		s.To(SlotClosed)
	}
}
