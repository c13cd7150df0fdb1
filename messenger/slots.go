package messenger

import (
	"context"
	"sync"
	"sync/atomic"
)

// reply is what a response slot receives.
type reply struct {
	payload []byte
	err     error
}

// slot is one waiting caller. Its channel lives as long as the table, so a
// call allocates no channel. gen changes on every release, so a reply that
// comes after its caller gave up finds a different generation and is
// discarded.
type slot struct {
	mu   sync.Mutex
	gen  uint32
	busy bool
	ch   chan reply
}

// slotTable is a bounded table of response slots, indexed straight from the
// response id: no map lookup per reply.
type slotTable struct {
	slots     []slot
	free      chan uint32   // slots given back
	fresh     atomic.Uint32 // slots never used yet: [fresh, len(slots))
	exhausted func()        // counts an acquisition that found no free slot
}

// newSlotTable makes room for n slots but builds each slot's channel on
// its first use, so a node that makes few calls pays for few slots.
func newSlotTable(n int, exhausted func()) *slotTable {
	return &slotTable{slots: make([]slot, n), free: make(chan uint32, n), exhausted: exhausted}
}

// take returns a free slot index without waiting.
func (t *slotTable) take() (uint32, bool) {
	select {
	case idx := <-t.free:
		return idx, true
	default:
	}
	for {
		n := t.fresh.Load()
		if int(n) >= len(t.slots) {
			return 0, false
		}
		if t.fresh.CompareAndSwap(n, n+1) {
			s := &t.slots[n]
			s.mu.Lock()
			s.ch = make(chan reply, 1)
			s.mu.Unlock()
			return n, true
		}
	}
}

// acquire takes a free slot, waiting (bounded by ctx) when all are in use.
// The token goes in the low 64 bits of the response id; it is never zero.
func (t *slotTable) acquire(ctx context.Context) (idx uint32, token uint64, err error) {
	idx, ok := t.take()
	if !ok {
		if t.exhausted != nil {
			t.exhausted()
		}
		select {
		case idx = <-t.free:
		case <-ctx.Done():
			return 0, 0, ctxErr(ctx)
		}
	}
	s := &t.slots[idx]
	s.mu.Lock()
	s.busy = true
	gen := s.gen
	s.mu.Unlock()
	return idx, uint64(gen)<<32 | uint64(idx+1), nil
}

// deliver hands r to the caller holding token. It reports false when the
// slot moved on (the caller timed out) or the token is bogus.
func (t *slotTable) deliver(token uint64, r reply) bool {
	idx := uint32(token) - 1
	if uint32(token) == 0 || int(idx) >= len(t.slots) {
		return false
	}
	s := &t.slots[idx]
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.busy || s.gen != uint32(token>>32) {
		return false
	}
	select {
	case s.ch <- r:
		return true
	default:
		return false // a reply is already there: a duplicate
	}
}

// wait blocks for the reply of slot idx, or ctx's end.
func (t *slotTable) wait(ctx context.Context, idx uint32) (reply, error) {
	select {
	case r := <-t.slots[idx].ch:
		return r, nil
	case <-ctx.Done():
		return reply{}, ctxErr(ctx)
	}
}

// release frees slot idx at once: a later reply is discarded.
func (t *slotTable) release(idx uint32) {
	s := &t.slots[idx]
	s.mu.Lock()
	s.gen++
	s.busy = false
	select {
	case <-s.ch:
	default:
	}
	s.mu.Unlock()
	t.free <- idx
}

// failAll delivers err to every busy slot (at shutdown).
func (t *slotTable) failAll(err error) {
	for i := range t.slots[:t.fresh.Load()] {
		s := &t.slots[i]
		s.mu.Lock()
		if s.busy {
			select {
			case s.ch <- reply{err: err}:
			default:
			}
		}
		s.mu.Unlock()
	}
}

// ctxErr maps a finished context to the messenger's error: a deadline is
// ErrRequestTimeout, a cancel stays context.Canceled.
func ctxErr(ctx context.Context) error {
	if ctx.Err() == context.DeadlineExceeded {
		return ErrRequestTimeout
	}
	return ctx.Err()
}
