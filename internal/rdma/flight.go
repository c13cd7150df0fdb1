package rdma

import (
	"context"
	"sync"
	"sync/atomic"
)

// flight counts work in flight behind a gate. Admission adds to the count
// first and reads the gate second; closing sets the gate first and reads
// the count second. With Go's sequentially consistent atomics one side
// always sees the other, so nothing is admitted after the closer has seen
// the count at zero. A flag check followed by the work would be the
// check-then-act race the book warns about (a registration landing after
// the sweep, with no tracking entry).
type flight struct {
	n      atomic.Int64
	gated  atomic.Bool
	once   sync.Once
	zeroCh chan struct{} // closed the first time the count is zero after the gate
}

func newFlight() *flight { return &flight{zeroCh: make(chan struct{})} }

// enter admits one unit of work, or refuses it once the gate is closed.
func (f *flight) enter() bool {
	f.n.Add(1)
	if f.gated.Load() {
		f.exit()
		return false
	}
	return true
}

// exit ends one admitted unit.
func (f *flight) exit() {
	if f.n.Add(-1) == 0 && f.gated.Load() {
		f.once.Do(func() { close(f.zeroCh) })
	}
}

// close gates new work. After it, the count only falls (a refused enter
// adds and takes back one), so zero is final.
func (f *flight) close() {
	f.gated.Store(true)
	if f.n.Load() == 0 {
		f.once.Do(func() { close(f.zeroCh) })
	}
}

func (f *flight) closed() bool { return f.gated.Load() }

// wait waits, after close, until nothing is in flight or ctx ends; it
// reports whether the count reached zero.
func (f *flight) wait(ctx context.Context) bool {
	select {
	case <-f.zeroCh:
		return true
	case <-ctx.Done():
		return false
	}
}
