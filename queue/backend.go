package queue

import "context"

// Backend owns named queues. Implementations take and give raw bytes; the
// typed handles encode and decode.
type Backend interface {
	// OpenSender creates or connects to the named queue for sending.
	OpenSender(ctx context.Context, name string) (RawSender, error)
	// OpenReceiver creates or connects to the named queue for receiving.
	OpenReceiver(ctx context.Context, name string) (RawReceiver, error)
}

// RawSender puts encoded items into one queue.
type RawSender interface {
	// Send puts data in the queue. It may wait for room while ctx allows.
	Send(ctx context.Context, data []byte) error
	// TrySend puts data in the queue or fails at once with ErrFull.
	TrySend(ctx context.Context, data []byte) error
	// Close ends this handle; later sends fail with ErrClosed.
	Close() error
}

// RawReceiver takes encoded items out of one queue.
type RawReceiver interface {
	// Receive waits for the next item until ctx is done. It returns
	// ErrClosed once the handle is closed (or, where the backend closes
	// queues, once the queue is closed and drained).
	Receive(ctx context.Context) (Delivery, error)
	// Close ends this handle. A waiting Receive returns ErrClosed. Items
	// the handle received and did not settle follow the backend's rule for
	// unacknowledged items.
	Close() error
}

// Delivery is one received item before decoding.
type Delivery interface {
	// Data is the encoded item.
	Data() []byte
	// Ack tells the queue the item is done; it is not delivered again.
	Ack(ctx context.Context) error
	// Nack hands the item back so that a receiver gets it again soon.
	Nack(ctx context.Context) error
}
