package storetest

import (
	"context"
	"sync"

	"github.com/velo-go/velo/ext"
	"github.com/velo-go/velo/hub/store"
)

// Op names a FaultStore call that a fault can hit.
type Op uint8

// The calls a fault can hit.
const (
	OpPut Op = iota + 1
	OpRemove
	OpTouch
	OpResolve
)

// IndeterminateMode says what a fault that answers ErrIndeterminate does
// with the write.
type IndeterminateMode uint8

const (
	// NoIndeterminate: the fault does not answer ErrIndeterminate.
	NoIndeterminate IndeterminateMode = iota
	// AppliedLost: the write applies and its answer is lost.
	AppliedLost
	// NotApplied: the write does not apply, and its answer is lost.
	NotApplied
)

// Fault is what a FaultStore does to the calls of one Op.
type Fault struct {
	// Gate, when set, stops each call at the gate until the gate opens
	// or the call's context ends (then the call answers the context's
	// error and does nothing). Touch ignores the gate.
	Gate *Gate
	// Err, when set, is answered instead of doing the call.
	Err error
	// Indeterminate makes a Put answer ErrIndeterminate (OpPut only).
	Indeterminate IndeterminateMode
	// Times is how many calls the fault hits; zero means every call
	// until Clear.
	Times int
}

// Gate stops calls until it is opened. Reached tells a test that a call
// is waiting at it.
type Gate struct {
	reached  chan struct{}
	once     sync.Once
	open     chan struct{}
	openOnce sync.Once
}

// NewGate builds a closed gate.
func NewGate() *Gate { return &Gate{reached: make(chan struct{}), open: make(chan struct{})} }

// Reached is closed once a call has stopped at the gate.
func (g *Gate) Reached() <-chan struct{} { return g.reached }

// Open lets every waiting and later call through.
func (g *Gate) Open() { g.openOnce.Do(func() { close(g.open) }) }

func (g *Gate) wait(ctx context.Context) error {
	g.once.Do(func() { close(g.reached) })
	select {
	case <-g.open:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// FaultStore is an InMemoryStore that fails, stops at a gate, or answers
// ErrIndeterminate on request, and whose continuity a test can set. With
// no fault set it is the in-memory store, and passes the suite.
type FaultStore struct {
	*store.InMemoryStore
	cont store.ContinuitySignal

	mu     sync.Mutex
	faults map[Op]*Fault
}

var _ store.Store = (*FaultStore)(nil)

// NewFaultStore builds an empty FaultStore.
func NewFaultStore(opts ...store.MemoryOption) (*FaultStore, error) {
	m, err := store.NewInMemoryStore(opts...)
	if err != nil {
		return nil, err
	}
	return &FaultStore{InMemoryStore: m, faults: map[Op]*Fault{}}, nil
}

// Inject sets the fault of op, replacing an earlier one.
func (f *FaultStore) Inject(op Op, fault Fault) {
	f.mu.Lock()
	defer f.mu.Unlock()
	c := fault
	f.faults[op] = &c
}

// Clear removes every fault.
func (f *FaultStore) Clear() {
	f.mu.Lock()
	defer f.mu.Unlock()
	clear(f.faults)
}

// SetContinuity makes the store report c, as a remote store does when it
// is cut off (Degraded), reloading (Lost) or fenced. Fenced stays until
// Close.
func (f *FaultStore) SetContinuity(c store.Continuity) { f.cont.Set(c) }

// take returns the fault of op for this call, counting it down.
func (f *FaultStore) take(op Op) *Fault {
	f.mu.Lock()
	defer f.mu.Unlock()
	ft := f.faults[op]
	if ft == nil {
		return nil
	}
	c := *ft
	if ft.Times > 0 {
		if ft.Times--; ft.Times == 0 {
			delete(f.faults, op)
		}
	}
	return &c
}

// before runs a fault's gate and error; it answers a non-nil error when
// the call must not go on.
func before(ctx context.Context, ft *Fault) error {
	if ft == nil {
		return nil
	}
	if ft.Gate != nil {
		if err := ft.Gate.wait(ctx); err != nil {
			return err
		}
	}
	return ft.Err
}

// Put implements store.Store with the OpPut fault.
func (f *FaultStore) Put(ctx context.Context, op store.OpID, rec store.Record, expect store.Incarnation) (store.Incarnation, error) {
	ft := f.take(OpPut)
	if err := before(ctx, ft); err != nil {
		return 0, err
	}
	if ft != nil && ft.Indeterminate == NotApplied {
		return 0, store.ErrIndeterminate
	}
	inc, err := f.InMemoryStore.Put(ctx, op, rec, expect)
	if ft != nil && ft.Indeterminate == AppliedLost {
		return 0, store.ErrIndeterminate
	}
	return inc, err
}

// Remove implements store.Store with the OpRemove fault.
func (f *FaultStore) Remove(ctx context.Context, id ext.InstanceID, inc store.Incarnation) error {
	if err := before(ctx, f.take(OpRemove)); err != nil {
		return err
	}
	return f.InMemoryStore.Remove(ctx, id, inc)
}

// Touch implements store.Store with the OpTouch fault's Err.
func (f *FaultStore) Touch(id ext.InstanceID, inc store.Incarnation) error {
	if ft := f.take(OpTouch); ft != nil && ft.Err != nil {
		return ft.Err
	}
	return f.InMemoryStore.Touch(id, inc)
}

// ResolveWrite implements store.Store with the OpResolve fault.
func (f *FaultStore) ResolveWrite(ctx context.Context, id ext.InstanceID, op store.OpID) (store.Entry, bool, error) {
	if err := before(ctx, f.take(OpResolve)); err != nil {
		return store.Entry{}, false, err
	}
	return f.InMemoryStore.ResolveWrite(ctx, id, op)
}

// Continuity implements store.Store: what SetContinuity set, or Closed.
func (f *FaultStore) Continuity() store.Continuity { return f.cont.Load() }

// ContinuityWatch implements store.Store.
func (f *FaultStore) ContinuityWatch() (store.Continuity, <-chan struct{}) { return f.cont.Watch() }

// Close implements store.Store.
func (f *FaultStore) Close(ctx context.Context) error {
	err := f.InMemoryStore.Close(ctx)
	f.cont.Set(store.Closed)
	return err
}
