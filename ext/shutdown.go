package ext

import (
	"context"
	"sync"
	"sync/atomic"
)

// ShutdownState is the drain flag and the in-flight count of one node.
//
// Admission is a store-buffer pattern: a producer adds to in-flight and then
// loads the drain flag; the drain stores the flag and then loads in-flight.
// Go's atomics are sequentially consistent, so one side always sees the other.
type ShutdownState struct {
	inFlight atomic.Int64
	draining atomic.Bool

	mu   sync.Mutex
	zero chan struct{} // closed when in-flight reaches zero during a drain
}

// NewShutdownState returns a state that admits work.
func NewShutdownState() *ShutdownState { return &ShutdownState{} }

// InFlightGuard is one unit of admitted work. Release it exactly once when
// the work is done; the drain waits for every guard.
type InFlightGuard struct{ s *ShutdownState }

// Release gives the unit back. Releasing the zero guard does nothing.
func (g InFlightGuard) Release() {
	if g.s != nil {
		g.s.release()
	}
}

// ReleaseN gives back n units of the guard's state at once, for a
// consumer that holds n guards equal to g (the same ShutdownState) and is
// done with them all: one atomic update instead of n. n <= 0, or the zero
// guard, does nothing.
func (g InFlightGuard) ReleaseN(n int) {
	if g.s != nil && n > 0 {
		g.s.releaseN(int64(n))
	}
}

// TryAcquire takes a guard unless the drain has begun. The guard is taken
// first and the flag read second; see the type comment.
func (s *ShutdownState) TryAcquire() (InFlightGuard, bool) {
	s.inFlight.Add(1)
	if s.draining.Load() {
		s.release()
		return InFlightGuard{}, false
	}
	return InFlightGuard{s: s}, true
}

// tryAcquireN takes n units at once, as TryAcquire does one, for
// AdmitMessages and AdmitBatch, which hand each unit out as a guard.
func (s *ShutdownState) tryAcquireN(n int) bool {
	s.inFlight.Add(int64(n))
	if s.draining.Load() {
		s.releaseN(int64(n))
		return false
	}
	return true
}

// acquireExempt counts a unit of drain-exempt work: admitted whatever the
// flag says, and still counted so the drain waits for it.
func (s *ShutdownState) acquireExempt() InFlightGuard {
	s.inFlight.Add(1)
	return InFlightGuard{s: s}
}

func (s *ShutdownState) release() { s.releaseN(1) }

func (s *ShutdownState) releaseN(n int64) {
	if s.inFlight.Add(-n) == 0 && s.draining.Load() {
		s.mu.Lock()
		if s.zero != nil {
			close(s.zero)
			s.zero = nil
		}
		s.mu.Unlock()
	}
}

// BeginDrain raises the drain flag. Later admissions are refused.
func (s *ShutdownState) BeginDrain() { s.draining.Store(true) }

// IsDraining is for reports only. Never use it to decide admission: that is
// a check-then-act race. Use TryAcquire.
func (s *ShutdownState) IsDraining() bool { return s.draining.Load() }

// InFlight is the number of admitted units not yet released.
func (s *ShutdownState) InFlight() int64 { return s.inFlight.Load() }

// WaitForDrain waits until nothing is in flight, or ctx ends. Call it after
// BeginDrain. It does not lose a wake-up when the last guard drops while it
// checks: the channel is made before the count is read.
func (s *ShutdownState) WaitForDrain(ctx context.Context) error {
	for {
		s.mu.Lock()
		if s.zero == nil {
			s.zero = make(chan struct{})
		}
		ch := s.zero
		s.mu.Unlock()
		if s.inFlight.Load() == 0 {
			return nil
		}
		select {
		case <-ch:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}
