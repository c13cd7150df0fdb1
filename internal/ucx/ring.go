//go:build ucx

package ucx

import (
	"context"
	"sync"

	"golang.org/x/sys/unix"
)

// command is one unit of work for the progress thread.
type command struct {
	run     func(l *loop)
	slotted bool // holds a slot of the bound; false for the loop's own pushes
}

// ring is the bounded command queue from submitters to the progress
// thread, and its doorbell. The loop parks only after it has seen the
// queue empty under mu and set parked; a submitter that finds parked set
// rings the eventfd, also under mu, so a push can never be missed and the
// fd is never written after teardown closes it.
type ring struct {
	slots chan struct{} // one token per queued submitter command

	mu     sync.Mutex
	items  []command
	spare  []command
	parked bool
	closed bool
	bell   int // eventfd
	rings  uint64
}

func newRing(depth int) (*ring, error) {
	fd, err := unix.Eventfd(0, unix.EFD_NONBLOCK|unix.EFD_CLOEXEC)
	if err != nil {
		return nil, err
	}
	return &ring{slots: make(chan struct{}, depth), bell: fd}, nil
}

// submit queues c. Off the progress thread it first takes a slot, waiting
// while the ring is full (until ctx ends or the worker closes); on the
// progress thread it never waits, since the thread would wait for itself.
func (w *Worker) submit(ctx context.Context, run func(l *loop)) error {
	r := w.ring
	c := command{run: run}
	select {
	case r.slots <- struct{}{}:
		c.slotted = true
	default:
		if !w.onLoop() {
			if err := w.waitSlot(ctx); err != nil {
				return err
			}
			c.slotted = true
		}
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.closed {
		if c.slotted {
			<-r.slots
		}
		return ErrClosed
	}
	r.items = append(r.items, c)
	if r.parked {
		r.parked = false
		r.rings++
		r.ring()
	}
	return nil
}

func (w *Worker) waitSlot(ctx context.Context) error {
	select {
	case w.ring.slots <- struct{}{}:
		return nil
	case <-w.closing:
		return ErrClosed
	case <-ctx.Done():
		return ctx.Err()
	}
}

// ring writes the eventfd; mu is held.
func (r *ring) ring() {
	var one = [8]byte{1}
	_, _ = unix.Write(r.bell, one[:])
}

// take hands the loop every queued command and frees their slots.
func (r *ring) take() []command {
	r.mu.Lock()
	batch := r.items
	r.items, r.spare = r.spare[:0], nil
	r.mu.Unlock()
	for _, c := range batch {
		if c.slotted {
			<-r.slots
		}
	}
	return batch
}

// recycle gives a processed batch back for reuse.
func (r *ring) recycle(batch []command) {
	clear(batch)
	r.mu.Lock()
	if r.spare == nil {
		r.spare = batch[:0]
	}
	r.mu.Unlock()
}

// empty reports whether no command is queued.
func (r *ring) empty() bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.items) == 0
}

// park sets parked if the ring is empty; false means work arrived.
func (r *ring) park() bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	if len(r.items) != 0 {
		return false
	}
	r.parked = true
	return true
}

func (r *ring) unpark() {
	r.mu.Lock()
	r.parked = false
	r.mu.Unlock()
}

// drainBell empties the eventfd after a wakeup.
func (r *ring) drainBell() {
	var buf [8]byte
	_, _ = unix.Read(r.bell, buf[:])
}

// close refuses further submissions and queues last, the loop's exit.
func (r *ring) close(last func(l *loop)) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.closed {
		return false
	}
	r.closed = true
	r.items = append(r.items, command{run: last})
	if r.parked {
		r.parked = false
		r.ring()
	}
	return true
}

// shut closes the eventfd once the loop has exited; mu makes it exclusive
// with any late ring.
func (r *ring) shut() {
	r.mu.Lock()
	defer r.mu.Unlock()
	_ = unix.Close(r.bell)
	r.bell = -1
}

// isParked reports whether the loop is parked (for tests).
func (r *ring) isParked() bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.parked
}
