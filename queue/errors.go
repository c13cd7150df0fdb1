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
)
