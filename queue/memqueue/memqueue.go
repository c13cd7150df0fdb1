// Package memqueue is the in-process queue backend, for tests and for work
// shared inside one process.
//
// Promise: items leave in the order they came in. A queue holds at most its
// capacity: Send waits for room, TrySend fails with queue.ErrFull. An item
// leaves the queue when it is received; Ack does nothing more, and Nack puts
// the item back at the head. An item received and never settled is lost
// (a receiver that stops holding one takes it with it), so this backend is
// at-most-once across a receiver crash. Closing any sender closes the
// queue: later sends fail with queue.ErrClosed, and receivers get the items
// left, then queue.ErrClosed.
package memqueue

import (
	"context"
	"sync"

	"github.com/velo-go/velo/queue"
)

// Backend holds named in-memory queues.
type Backend struct {
	capacity int
	mu       sync.Mutex
	queues   map[string]*memQueue
}

// New returns a backend whose queues each hold at most capacity items
// (at least 1).
func New(capacity int) *Backend {
	return &Backend{capacity: max(capacity, 1), queues: make(map[string]*memQueue)}
}

func (b *Backend) get(name string) *memQueue {
	b.mu.Lock()
	defer b.mu.Unlock()
	q := b.queues[name]
	if q == nil {
		q = &memQueue{capacity: b.capacity, changed: make(chan struct{})}
		b.queues[name] = q
	}
	return q
}

// OpenSender implements queue.Backend.
func (b *Backend) OpenSender(_ context.Context, name string) (queue.RawSender, error) {
	return &sender{q: b.get(name)}, nil
}

// OpenReceiver implements queue.Backend.
func (b *Backend) OpenReceiver(_ context.Context, name string) (queue.RawReceiver, error) {
	return &receiver{q: b.get(name), done: make(chan struct{})}, nil
}

// memQueue is one named queue. changed is closed and replaced whenever an
// item arrives, an item leaves, or the queue closes: waiters watch it.
type memQueue struct {
	mu       sync.Mutex
	items    [][]byte
	capacity int
	closed   bool
	changed  chan struct{}
}

// wakeLocked tells every waiter that the state changed.
func (q *memQueue) wakeLocked() {
	close(q.changed)
	q.changed = make(chan struct{})
}

// put appends data, or returns the channel to wait on when full.
func (q *memQueue) put(data []byte) (<-chan struct{}, error) {
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.closed {
		return nil, queue.ErrClosed
	}
	if len(q.items) >= q.capacity {
		return q.changed, queue.ErrFull
	}
	q.items = append(q.items, data)
	q.wakeLocked()
	return nil, nil
}

// take removes the head item (ok), or returns the channel to wait on when
// empty.
func (q *memQueue) take() (data []byte, ok bool, wait <-chan struct{}, err error) {
	q.mu.Lock()
	defer q.mu.Unlock()
	if len(q.items) > 0 {
		data := q.items[0]
		q.items[0] = nil
		q.items = q.items[1:]
		q.wakeLocked()
		return data, true, nil, nil
	}
	if q.closed {
		return nil, false, nil, queue.ErrClosed
	}
	return nil, false, q.changed, nil
}

// putBack returns a handed-back item to the head, even past capacity, so
// that Nack never fails for want of room.
func (q *memQueue) putBack(data []byte) {
	q.mu.Lock()
	defer q.mu.Unlock()
	q.items = append([][]byte{data}, q.items...)
	q.wakeLocked()
}

func (q *memQueue) close() {
	q.mu.Lock()
	defer q.mu.Unlock()
	if !q.closed {
		q.closed = true
		q.wakeLocked()
	}
}
