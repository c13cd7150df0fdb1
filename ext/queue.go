package ext

import (
	"context"
	"errors"
	"sync"
)

// ErrQueueClosed is returned by a Queue that was closed.
var ErrQueueClosed = errors.New("velo: queue closed")

// Queue is a bounded multi-producer queue of inbound items. It is a mutex
// and a slice rather than a channel so a consumer can take everything queued
// in one step (one lock per batch, not one channel operation per item).
type Queue[T any] struct {
	mu       sync.Mutex
	items    []T
	capacity int
	closed   bool
	notEmpty chan struct{} // made by a waiting consumer, closed by a producer
	notFull  chan struct{} // made by a waiting producer, closed by a consumer
}

// NewQueue makes a queue that holds at most capacity items (at least 1).
func NewQueue[T any](capacity int) *Queue[T] {
	if capacity < 1 {
		capacity = 1
	}
	return &Queue[T]{capacity: capacity}
}

// Push adds v, waiting while the queue is full. It fails only when the queue
// is closed; then v was not added.
func (q *Queue[T]) Push(v T) error {
	q.mu.Lock()
	q.waitRoomLocked()
	if q.closed {
		q.mu.Unlock()
		return ErrQueueClosed
	}
	q.items = append(q.items, v)
	q.wakeConsumerLocked()
	q.mu.Unlock()
	return nil
}

// pushSwap queues every item of vs. When the queue is empty and vs fits,
// vs itself becomes the queue and the queue's empty slice is returned as
// spare; otherwise the items are copied and vs is returned emptied. On
// ErrQueueClosed the first n items were queued.
func (q *Queue[T]) pushSwap(vs []T) (spare []T, n int, err error) {
	q.mu.Lock()
	if len(q.items) == 0 && len(vs) <= q.capacity && !q.closed {
		spare, q.items = q.items[:0], vs
		q.wakeConsumerLocked()
		q.mu.Unlock()
		return spare, len(vs), nil
	}
	for n < len(vs) {
		q.waitRoomLocked()
		if q.closed {
			err = ErrQueueClosed
			break
		}
		// One bulk copy, not one call per item.
		k := min(len(vs)-n, q.capacity-len(q.items))
		q.items = append(q.items, vs[n:n+k]...)
		n += k
		q.wakeConsumerLocked()
	}
	q.mu.Unlock()
	if err != nil {
		clear(vs[:n]) // vs[n:] were not queued: still the caller's to release
		return vs, n, err
	}
	clear(vs)
	return vs[:0], n, nil
}

// waitRoomLocked waits, with q.mu held (and released while it waits),
// until the queue has room or is closed.
func (q *Queue[T]) waitRoomLocked() {
	for len(q.items) >= q.capacity && !q.closed {
		if q.notFull == nil {
			q.notFull = make(chan struct{})
		}
		ch := q.notFull
		q.mu.Unlock()
		<-ch
		q.mu.Lock()
	}
}

// waitItems locks q.mu and returns with it held once an item is queued. On
// an error (closed and empty, or ctx done) it returns with q.mu released.
func (q *Queue[T]) waitItems(ctx context.Context) error {
	q.mu.Lock()
	for len(q.items) == 0 {
		if q.closed {
			q.mu.Unlock()
			return ErrQueueClosed
		}
		if q.notEmpty == nil {
			q.notEmpty = make(chan struct{})
		}
		ch := q.notEmpty
		q.mu.Unlock()
		select {
		case <-ch:
		case <-ctx.Done():
			return ctx.Err()
		}
		q.mu.Lock()
	}
	return nil
}

func (q *Queue[T]) wakeConsumerLocked() {
	if q.notEmpty != nil {
		close(q.notEmpty)
		q.notEmpty = nil
	}
}

// PopAll waits until at least one item is queued, then moves every queued
// item onto dst and returns it. Pass the previous batch back as dst[:0] to
// reuse its memory. It returns ErrQueueClosed once the queue is closed and
// empty, or ctx's error.
func (q *Queue[T]) PopAll(ctx context.Context, dst []T) ([]T, error) {
	if err := q.waitItems(ctx); err != nil {
		return dst, err
	}
	// Swap rather than copy: the consumer's spare slice becomes the queue's.
	out := q.items
	if len(dst) == 0 {
		q.items = dst[:0]
		dst = out
	} else {
		dst = append(dst, out...)
		clear(out)
		q.items = out[:0]
	}
	if q.notFull != nil {
		close(q.notFull)
		q.notFull = nil
	}
	q.mu.Unlock()
	return dst, nil
}

// Pop waits for one item.
func (q *Queue[T]) Pop(ctx context.Context) (T, error) {
	if err := q.waitItems(ctx); err != nil {
		var zero T
		return zero, err
	}
	v := q.items[0]
	var zero T
	q.items[0] = zero
	q.items = q.items[1:]
	if len(q.items) == 0 {
		q.items = q.items[:0] // reuse what is left of the array
	}
	if q.notFull != nil {
		close(q.notFull)
		q.notFull = nil
	}
	q.mu.Unlock()
	return v, nil
}

// Len is the number of queued items (for tests and reports).
func (q *Queue[T]) Len() int {
	q.mu.Lock()
	defer q.mu.Unlock()
	return len(q.items)
}

// Close refuses later pushes, wakes every waiter and hands each item still
// queued to drop (which may be nil), so no guard is left holding a drain open.
// Items already taken by consumers are theirs.
func (q *Queue[T]) Close(drop func(T)) {
	q.mu.Lock()
	if q.closed {
		q.mu.Unlock()
		return
	}
	q.closed = true
	left := q.items
	q.items = nil
	q.wakeConsumerLocked()
	if q.notFull != nil {
		close(q.notFull)
		q.notFull = nil
	}
	q.mu.Unlock()
	if drop != nil {
		for _, v := range left {
			drop(v)
		}
	}
}
