package rdmatest

import (
	"context"
	"sync"
)

// FailGets makes the next n GETs this backend runs fail.
func (b *Backend) FailGets(n int) {
	b.mu.Lock()
	b.failGets = n
	b.mu.Unlock()
}

// FailMaps makes the next n Maps fail with ErrInjected.
func (b *Backend) FailMaps(n int) {
	b.mu.Lock()
	b.failMaps = n
	b.mu.Unlock()
}

// FailUnmaps makes the next n Unmaps fail with ErrInjected, leaving their
// mappings mapped.
func (b *Backend) FailUnmaps(n int) {
	b.mu.Lock()
	b.failUnmaps = n
	b.mu.Unlock()
}

// HoldUnmaps makes every Unmap wait, before it does anything, until the
// returned release is called: a real backend's unmap that waits for a GET
// of its own into the memory, one the transport answers only when it
// closes.
func (b *Backend) HoldUnmaps() (release func()) {
	ch := make(chan struct{})
	b.mu.Lock()
	b.unmapHold = ch
	b.mu.Unlock()
	var once sync.Once
	return func() {
		once.Do(func() {
			b.mu.Lock()
			b.unmapHold = nil
			b.mu.Unlock()
			close(ch)
		})
	}
}

// OnMap makes f run at the start of every Map, before anything is
// recorded, in the mapping goroutine: a test can hold a map in progress
// there. nil removes it.
func (b *Backend) OnMap(f func()) {
	b.mu.Lock()
	b.onMap = f
	b.mu.Unlock()
}

// BlockGets parks every GET this backend runs, and every GET that reads
// one of its mappings, until ReleaseGets, Kill, or the GET's ctx ends.
// A parked GET has not touched memory yet: an Unmap does not wait for
// it, and it fails if its key is gone when it resumes. That is a remote
// GET mid-flight, which the owner cannot see.
func (b *Backend) BlockGets() {
	b.mu.Lock()
	if b.blocked == nil {
		b.blocked = make(chan struct{})
	}
	b.mu.Unlock()
}

// ReleaseGets lets parked GETs run, and stops parking new ones.
func (b *Backend) ReleaseGets() {
	b.mu.Lock()
	if b.blocked != nil {
		close(b.blocked)
		b.blocked = nil
	}
	b.mu.Unlock()
}

// Kill is the process dying: every GET this backend runs or that reads
// its memory fails from now on, parked ones at once. It cannot be undone.
func (b *Backend) Kill() {
	b.mu.Lock()
	if !b.dead {
		b.dead = true
		close(b.killed)
	}
	b.mu.Unlock()
}

// Parked is the number of GETs parked on this backend now (as runner or
// as target).
func (b *Backend) Parked() int {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.parked
}

// WaitParked waits until at least n GETs are parked on this backend, or
// ctx ends.
func (b *Backend) WaitParked(ctx context.Context, n int) error {
	for {
		b.mu.Lock()
		if b.parked >= n {
			b.mu.Unlock()
			return nil
		}
		ch := b.parkedCh
		b.mu.Unlock()
		select {
		case <-ch:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

func (b *Backend) takeGetFailure() bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.failGets > 0 {
		b.failGets--
		return true
	}
	return false
}

func (b *Backend) hooks() (blocked, killed <-chan struct{}, dead bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.blocked != nil {
		blocked = b.blocked
	}
	return blocked, b.killed, b.dead
}

func (b *Backend) addParked(d int) {
	b.mu.Lock()
	b.parked += d
	close(b.parkedCh)
	b.parkedCh = make(chan struct{})
	b.mu.Unlock()
}
