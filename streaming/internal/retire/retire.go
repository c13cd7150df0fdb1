// Package retire is what became of a stream's output on the producer's
// node: the outcome (streaming.RetireOutcome) and the record of it that
// every producer path keeps, the same-worker inlet's, the mux's and the
// per-stream path's alike.
package retire

import (
	"fmt"
	"sync/atomic"
	"unsafe"
)

// Outcome is streaming.RetireOutcome; its documentation is there.
type Outcome uint8

const (
	// Sent is streaming.RetireSent.
	Sent Outcome = iota + 1
	// Discarded is streaming.RetireDiscarded.
	Discarded
)

func (o Outcome) String() string {
	switch o {
	case Sent:
		return "Sent"
	case Discarded:
		return "Discarded"
	}
	return fmt.Sprintf("RetireOutcome(%d)", uint8(o))
}

// Settlement is the outcome of a sender's output and the one channel its
// waiters share. Its owner guards it with a lock of its own; Known alone
// may be called without it.
//
// A stream that nobody watches never makes the channel, and a watcher that
// comes after the end gets an already-closed channel: the common cases
// cost no allocation and no channel operation beyond the close.
type Settlement struct {
	outcome atomic.Uint32 // an Outcome, 0 until known; read without the lock
	done    chan struct{} // made by the first watcher before the end
}

// Known returns the outcome, 0 until the sender has ended. It takes no
// lock.
func (r *Settlement) Known() Outcome { return Outcome(r.outcome.Load()) }

// closedChs are the channels of settlements whose outcome is known. Even
// a closed channel is received from under its lock, so one shared channel
// would bounce between cores when many streams retire at once; Closed
// spreads the settlements over several.
var closedChs = func() (cs [16]chan struct{}) {
	for i := range cs {
		cs[i] = make(chan struct{})
		close(cs[i])
	}
	return cs
}()

// Closed is a closed channel for r, picked by its address: what a watcher
// gets once the outcome is known.
func (r *Settlement) Closed() <-chan struct{} {
	return closedChs[(uintptr(unsafe.Pointer(r))>>6)%uintptr(len(closedChs))]
}

// WatchLocked returns the channel that closes once the outcome is known.
// The caller holds the owner's lock.
func (r *Settlement) WatchLocked() <-chan struct{} {
	if r.Known() != 0 {
		return r.Closed()
	}
	if r.done == nil {
		r.done = make(chan struct{})
	}
	return r.done
}

// SettleLocked records out and closes the waiters' channel, if any. The
// caller holds the owner's lock; closing under it is fine (a close never
// blocks), and it keeps the outcome visible before any waiter wakes. The
// first outcome stands: a stream the peer ended and whose producer then
// finalizes stays as the end settled it.
func (r *Settlement) SettleLocked(out Outcome) {
	if r.Known() != 0 {
		return
	}
	r.outcome.Store(uint32(out))
	if r.done != nil {
		close(r.done)
	}
}
