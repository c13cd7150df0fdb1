package queue

import "errors"

// Errors of the queues. Check them with errors.Is.
var (
	// ErrClosed: the handle, or the queue behind it, is closed.
	ErrClosed = errors.New("queue: closed")
	// ErrFull: the queue holds as many items as its capacity allows.
	ErrFull = errors.New("queue: full")
	// ErrAcked: the item was already settled (acknowledged or handed back).
	ErrAcked = errors.New("queue: item already settled")
	// ErrLeaseLost: the item was held past the ack wait, so the queue gave
	// it to another receiver; this receiver's Ack came too late.
	ErrLeaseLost = errors.New("queue: lease expired; the item was delivered again")
)
