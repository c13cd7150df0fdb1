package events

import (
	"context"
	crand "crypto/rand"
	"errors"
	"fmt"
	"math/rand/v2"
	"runtime"
	"sync"
	"sync/atomic"

	"github.com/velo-go/velo/ext"
	"github.com/velo-go/velo/internal/msgerr"
)

// Errors of the event system.
var (
	// ErrAlreadyCompleted: the event was triggered or poisoned before. It
	// keeps its identity across the wire (a messenger sentinel), as do
	// ErrUnknownEvent and ErrNotSender.
	ErrAlreadyCompleted error = msgerr.NewSentinel(msgerr.FailedPrecondition, "event_already_completed", "velo: event already completed")
	// ErrUnknownEvent: the handle names no event this node knows: never
	// made here, or completed so long ago that its slot was reused.
	ErrUnknownEvent error = msgerr.NewSentinel(msgerr.NotFound, "event_unknown", "velo: unknown or stale event handle")
	// ErrPoisoned matches every *PoisonedError.
	ErrPoisoned = errors.New("velo: event poisoned")
	// ErrClosed: the manager was closed (its node shut down).
	ErrClosed = errors.New("velo: event manager closed")
	// ErrSubscriptionLimit: the owner refused a subscription because this
	// node holds as many on its pending events as it allows one peer.
	ErrSubscriptionLimit = errors.New("velo: too many subscriptions to one owner's pending events")
	// ErrNotSender: the owner refused a request whose body names a node
	// other than the one that sent it.
	ErrNotSender error = msgerr.NewSentinel(msgerr.PermissionDenied, "event_not_sender", "velo: event request names a node other than its sender")
)

// PoisonedError carries the reason an event was poisoned. It matches ErrPoisoned.
type PoisonedError struct {
	Handle Handle
	Reason string
}

func (e *PoisonedError) Error() string {
	return fmt.Sprintf("velo: event %s poisoned: %s", e.Handle, e.Reason)
}

// Is makes errors.Is(err, ErrPoisoned) true.
func (e *PoisonedError) Is(target error) bool { return target == ErrPoisoned }

// completion is one event's outcome. Its fields are written before done
// is closed, so a waiter reads them after <-done without a lock.
type completion struct {
	done     chan struct{}
	poisoned bool
	reason   string
	err      error                                // set instead when the wait itself failed (shutdown, network)
	onDone   []func(poisoned bool, reason string) // run once, outside the lock
	waiters  int                                  // remote waits on it; guarded by the manager's lock
	sub      uint64                               // which subscription of this node it is (remote waits)
	abandon  context.CancelFunc                   // ends the subscribing of a remote wait whose waiters all left
}

func newCompletion() *completion { return &completion{done: make(chan struct{})} }

func (c *completion) result(h Handle) error {
	switch {
	case c.err != nil:
		return c.err
	case c.poisoned:
		return &PoisonedError{Handle: h, Reason: c.reason}
	}
	return nil
}

func (c *completion) wait(ctx context.Context, h Handle) error {
	select {
	case <-c.done:
		return c.result(h)
	case <-ctx.Done():
		return ctx.Err()
	}
}

// slot holds one live event at a time, and the outcome of the one before
// it, so a wait that comes after completion is answered without a map.
//
// A slot's index on the wire and its first generation are random, drawn
// when the slot is made: a handle is what a peer presents to complete an
// event (_event_trigger_request), so a node that was never given a handle
// must not be able to name a pending one. The generation then grows by one
// per reuse, as the reference's subscribers expect (they read every
// generation at or below the highest completed one as complete).
type slot struct {
	wire    uint32 // the index in this slot's handles
	gen     uint32
	c       *completion // nil when the slot is free
	hasLast bool
	lastGen uint32
	last    result
}

// settled returns the outcome of h if h is the slot's last completed event.
func (s *slot) settled(h Handle) (result, bool) {
	if s.hasLast && s.lastGen == h.gen() {
		return s.last, true
	}
	return result{}, false
}

// slotFor returns the slot h names, or nil. The lock is held.
func (m *Manager) slotFor(h Handle) *slot {
	_, s := m.slotAt(h)
	return s
}

// slotAt returns the slot h names and its position, or a nil slot. The
// lock is held.
func (m *Manager) slotAt(h Handle) (uint32, *slot) {
	if h.Owner() != m.owner {
		return 0, nil
	}
	pos, ok := m.byWire[h.index()]
	if !ok {
		return 0, nil
	}
	return pos, &m.slots[pos]
}

// maxSlots bounds the slot table at a quarter of the 31-bit index space,
// so drawing an unused random index takes few tries.
const maxSlots = 1 << 29

// newSlot appends a slot with a random unused index and a random first
// generation, and returns its position. The lock is held.
func (m *Manager) newSlot() uint32 {
	var wire uint32
	for {
		// Bit 63 of a handle (the index's top bit) is the reference's
		// local-only flag: the index stays below it.
		wire = uint32(m.rng.Uint64()) &^ (1 << 31)
		if _, taken := m.byWire[wire]; !taken {
			break
		}
	}
	// Generations start in [1, 2^31]: never 0 (the reference reads
	// generation 0 of a remote handle as already complete), and at least
	// 2^31 reuses before the counter wraps.
	gen := uint32(m.rng.Uint64()>>33) + 1
	pos := uint32(len(m.slots))
	m.slots = append(m.slots, slot{wire: wire, gen: gen})
	m.byWire[wire] = pos
	return pos
}

// Manager makes events and waits on handles. NewLocal makes one for a
// process; a node's manager (see velo.Node.Events) is also distributed.
type Manager struct {
	owner ext.WorkerID

	mu     sync.Mutex
	slots  []slot
	byWire map[uint32]uint32 // a slot's wire index to its position in slots
	free   []uint32          // positions of slots with no live event
	rng    *rand.ChaCha8     // draws wire indexes and first generations
	done   *resultCache      // outcomes of other nodes' events, for late remote waits

	remote *remote // nil for a local manager
	closed atomic.Bool
}

// NewLocal makes a manager for events that stay in this process.
func NewLocal() *Manager { return newManager(ext.NewInstanceID().WorkerID()) }

func newManager(owner ext.WorkerID) *Manager {
	var seed [32]byte
	crand.Read(seed[:]) // never fails (crypto/rand panics rather than return short)
	return &Manager{owner: owner, byWire: map[uint32]uint32{}, rng: rand.NewChaCha8(seed), done: newResultCache(defaultCacheSize)}
}

// Owner is the WorkerID written into this manager's handles.
func (m *Manager) Owner() ext.WorkerID { return m.owner }

// Event is the completing side of an event. Trigger or Poison it exactly
// once. If it becomes unreachable first, a runtime cleanup poisons it.
type Event struct {
	m       *Manager
	h       Handle
	done    atomic.Bool
	cleanup runtime.Cleanup
}

// NewEvent makes a pending event.
func (m *Manager) NewEvent() (*Event, error) {
	if m.closed.Load() {
		return nil, ErrClosed
	}
	m.mu.Lock()
	var pos uint32
	if n := len(m.free); n > 0 {
		pos = m.free[n-1]
		m.free = m.free[:n-1]
	} else {
		if len(m.slots) >= maxSlots {
			m.mu.Unlock()
			return nil, errors.New("velo: too many pending events")
		}
		pos = m.newSlot()
	}
	s := &m.slots[pos]
	// The channel is made only if someone waits before completion.
	s.c = &completion{}
	h := makeHandle(m.owner, s.wire, s.gen)
	m.mu.Unlock()
	e := &Event{m: m, h: h}
	// The safety net: nobody can complete an unreachable event, so poison
	// it rather than let its waiters wait for ever.
	e.cleanup = runtime.AddCleanup(e, func(h Handle) {
		// Not on the runtime's cleanup goroutine: completing may notify
		// remote subscribers, and a stalled peer must not hold up every
		// other cleanup in the process.
		go m.complete(h, true, "event dropped without trigger or poison")
	}, h)
	return e, nil
}

// Handle names the event, for waiters here or on other nodes.
func (e *Event) Handle() Handle { return e.h }

// Trigger completes the event successfully.
func (e *Event) Trigger() error { return e.finish(false, "") }

// Poison completes the event with a failure that every waiter sees.
func (e *Event) Poison(reason string) error { return e.finish(true, reason) }

func (e *Event) finish(poisoned bool, reason string) error {
	if !e.done.CompareAndSwap(false, true) {
		return ErrAlreadyCompleted
	}
	e.cleanup.Stop()
	return e.m.complete(e.h, poisoned, reason)
}

// complete settles the event of h, if h is still its live generation.
func (m *Manager) complete(h Handle, poisoned bool, reason string) error {
	if h.Owner() != m.owner {
		return fmt.Errorf("%w: %s is owned by worker %s", ErrUnknownEvent, h, h.Owner())
	}
	m.mu.Lock()
	pos, s := m.slotAt(h)
	if s == nil {
		m.mu.Unlock()
		return ErrUnknownEvent
	}
	if s.gen != h.gen() || s.c == nil {
		_, settled := s.settled(h)
		m.mu.Unlock()
		if settled {
			return ErrAlreadyCompleted
		}
		return ErrUnknownEvent
	}
	c := s.c
	s.c = nil
	s.hasLast, s.lastGen, s.last = true, s.gen, result{poisoned: poisoned, reason: reason}
	s.gen++ // a handle of this generation is stale from now on
	if s.gen == 0 {
		s.gen = 1
	}
	m.free = append(m.free, pos)
	c.poisoned, c.reason = poisoned, reason
	cbs := c.onDone
	c.onDone = nil
	done := c.done
	m.mu.Unlock()
	if done != nil {
		close(done)
	}
	for _, cb := range cbs {
		cb(poisoned, reason)
	}
	return nil
}

// Wait returns nil once the event of h is triggered, a *PoisonedError if it
// is poisoned, or ctx's error. A handle of another node is waited on through
// that node (distributed managers only).
func (m *Manager) Wait(ctx context.Context, h Handle) error {
	if h.Owner() != m.owner {
		if m.remote == nil {
			return fmt.Errorf("%w: %s belongs to another node and this manager is local", ErrUnknownEvent, h)
		}
		return m.remote.wait(ctx, h)
	}
	c, err := m.pending(h)
	if c == nil {
		return err
	}
	return c.wait(ctx, h)
}

// pending returns the completion of a live local event, or the settled
// result (as an error, nil for triggered) when it already completed.
func (m *Manager) pending(h Handle) (*completion, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if s := m.slotFor(h); s != nil {
		if s.gen == h.gen() && s.c != nil {
			if s.c.done == nil {
				s.c.done = make(chan struct{})
			}
			return s.c, nil
		}
		if r, ok := s.settled(h); ok {
			return nil, r.err(h)
		}
	}
	return nil, ErrUnknownEvent
}

// follow registers cb to run when the local event of h completes and
// reports completed=false; for an event that already completed it registers
// nothing and returns the outcome. An unknown handle is an error.
func (m *Manager) follow(h Handle, cb func(poisoned bool, reason string)) (res result, completed bool, err error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if s := m.slotFor(h); s != nil {
		if s.gen == h.gen() && s.c != nil {
			s.c.onDone = append(s.c.onDone, cb)
			return result{}, false, nil
		}
		if r, ok := s.settled(h); ok {
			return r, true, nil
		}
	}
	return result{}, false, ErrUnknownEvent
}

// outcome reports how the local event of h ended, or done=false while it
// is pending. An unknown handle is an error.
func (m *Manager) outcome(h Handle) (res result, done bool, err error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if s := m.slotFor(h); s != nil {
		if s.gen == h.gen() && s.c != nil {
			return result{}, false, nil
		}
		if r, ok := s.settled(h); ok {
			return r, true, nil
		}
	}
	return result{}, false, ErrUnknownEvent
}

// onComplete runs cb when the local event of h completes, at once if it
// already has.
func (m *Manager) onComplete(h Handle, cb func(poisoned bool, reason string)) error {
	r, completed, err := m.follow(h, cb)
	if err == nil && completed {
		cb(r.poisoned, r.reason)
	}
	return err
}

// Merge makes an AND gate: the returned event completes once every input
// has. The first poisoned input poisons it, with that input's reason. ctx
// bounds the waits on other nodes' inputs: when it ends first, the merged
// event is poisoned with ctx's error.
func (m *Manager) Merge(ctx context.Context, inputs ...Handle) (Handle, error) {
	e, err := m.NewEvent()
	if err != nil {
		return Handle{}, err
	}
	left := atomic.Int64{}
	left.Store(int64(len(inputs)))
	settle := func(poisoned bool, reason string) {
		if poisoned {
			e.Poison(reason)
		} else if left.Add(-1) == 0 {
			e.Trigger()
		}
	}
	if len(inputs) == 0 {
		e.Trigger()
	}
	for _, in := range inputs {
		if in.Owner() == m.owner {
			if err := m.onComplete(in, settle); err != nil {
				settle(true, fmt.Sprintf("input %s: %v", in, err))
			}
			continue
		}
		go m.followRemote(ctx, in, settle)
	}
	return e.Handle(), nil
}

// followRemote waits on a remote input of a merge. One goroutine per
// remote input: merges of remote events are rare next to plain waits.
func (m *Manager) followRemote(ctx context.Context, h Handle, settle func(bool, string)) {
	err := m.Wait(ctx, h)
	var pe *PoisonedError
	switch {
	case err == nil:
		settle(false, "")
	case errors.As(err, &pe):
		settle(true, pe.Reason)
	default:
		settle(true, err.Error())
	}
}

// Close fails remote waits in progress with ErrClosed and refuses new
// events. Local events already made can still complete.
func (m *Manager) Close() {
	if m.closed.Swap(true) {
		return
	}
	if m.remote != nil {
		m.remote.close()
	}
}
