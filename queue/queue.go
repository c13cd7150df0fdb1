package queue

import (
	"context"
	"fmt"
)

// Sender puts items of type T into one named queue.
type Sender[T any] struct {
	raw  RawSender
	name string
}

// NewSender opens the named queue of b for sending items of type T.
func NewSender[T any](ctx context.Context, b Backend, name string) (*Sender[T], error) {
	raw, err := b.OpenSender(ctx, name)
	if err != nil {
		return nil, fmt.Errorf("queue %q: open sender: %w", name, err)
	}
	return &Sender[T]{raw: raw, name: name}, nil
}

// Send enqueues item. It waits for room where the backend allows waiting.
func (s *Sender[T]) Send(ctx context.Context, item T) error {
	data, err := Marshal(item)
	if err != nil {
		return fmt.Errorf("queue %q: encode item: %w", s.name, err)
	}
	return s.raw.Send(ctx, data)
}

// TrySend enqueues item, or fails with ErrFull at once when there is no room.
func (s *Sender[T]) TrySend(ctx context.Context, item T) error {
	data, err := Marshal(item)
	if err != nil {
		return fmt.Errorf("queue %q: encode item: %w", s.name, err)
	}
	return s.raw.TrySend(ctx, data)
}

// Close ends the handle. The backend says whether it also closes the queue.
func (s *Sender[T]) Close() error { return s.raw.Close() }

// Receiver takes items of type T from one named queue.
type Receiver[T any] struct {
	raw  RawReceiver
	name string
}

// NewReceiver opens the named queue of b for receiving items of type T.
func NewReceiver[T any](ctx context.Context, b Backend, name string) (*Receiver[T], error) {
	raw, err := b.OpenReceiver(ctx, name)
	if err != nil {
		return nil, fmt.Errorf("queue %q: open receiver: %w", name, err)
	}
	return &Receiver[T]{raw: raw, name: name}, nil
}

// Receive waits for the next item until ctx is done. An item that does not
// decode as T is acknowledged and reported as an error, so that one bad
// item cannot come back forever.
func (r *Receiver[T]) Receive(ctx context.Context) (*Item[T], error) {
	d, err := r.raw.Receive(ctx)
	if err != nil {
		return nil, err
	}
	it := &Item[T]{d: d}
	if err := Unmarshal(d.Data(), &it.Value); err != nil {
		_ = d.Ack(ctx)
		return nil, fmt.Errorf("queue %q: decode item (dropped): %w", r.name, err)
	}
	return it, nil
}

// Close ends the handle; a waiting Receive returns ErrClosed.
func (r *Receiver[T]) Close() error { return r.raw.Close() }

// Item is one received item.
type Item[T any] struct {
	Value T
	d     Delivery
}

// Ack tells the queue the item is done.
func (it *Item[T]) Ack(ctx context.Context) error { return it.d.Ack(ctx) }

// Nack hands the item back for another delivery.
func (it *Item[T]) Nack(ctx context.Context) error { return it.d.Nack(ctx) }
