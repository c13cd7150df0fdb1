package ext

import (
	"context"
	"sync"
)

// SendOutcome is what a transport's Send reports. Either the frame reached
// the send channel of its target (Admitted), or the channel was full and the
// frame waits in the admission gate (Pending). Pending admissions of one
// (target, lane) resolve in the order they were sent.
type SendOutcome struct {
	pending *Admission
}

// AdmittedOutcome is the outcome of a frame that reached its send channel.
var AdmittedOutcome = SendOutcome{}

// Admitted reports whether the frame is already in the send channel.
func (o SendOutcome) Admitted() bool { return o.pending == nil }

// Admission returns the pending admission, or nil when Admitted.
func (o SendOutcome) Admission() *Admission { return o.pending }

// Wait returns nil once the frame is in the send channel, or the error that
// failed it. For an Admitted outcome it returns nil at once.
func (o SendOutcome) Wait(ctx context.Context) error {
	if o.pending == nil {
		return nil
	}
	return o.pending.Wait(ctx)
}

// Admission is a send waiting in an AdmissionGate.
type Admission struct {
	done chan struct{}
	err  error
}

// Done is closed when the admission resolves.
func (a *Admission) Done() <-chan struct{} { return a.done }

// Err is the result once Done is closed: nil when admitted.
func (a *Admission) Err() error { return a.err }

// Wait blocks until the admission resolves or ctx ends. When ctx ends first
// the frame stays queued: it will still be sent or failed in order.
func (a *Admission) Wait(ctx context.Context) error {
	select {
	case <-a.done:
		return a.err
	case <-ctx.Done():
		return ctx.Err()
	}
}

// GateSink is the bounded channel behind an AdmissionGate. The gate calls
// Accept with its lock held, so Accept must be quick and must not block.
type GateSink[T any] interface {
	Accept(item T)
}

type pendingItem[T any] struct {
	item  T
	units int
	adm   *Admission
}

// AdmissionGate bounds the send channel of one (target, lane). A send that
// fits goes straight into the sink; one that does not waits in a FIFO and is
// admitted, in order, when the consumer frees room. Capacity is in caller
// units (bytes, say); one item larger than the capacity is admitted alone
// when the channel is empty, so no size is refused here.
//
// The gate's lock also guards the sink, so the consumer takes items out
// inside Drain.
type AdmissionGate[T any] struct {
	mu       sync.Mutex
	sink     GateSink[T]
	used     int
	capacity int
	pending  []pendingItem[T]
	head     int
	failed   error

	// A fence (see Fence) caps what the gate admits in total, not just
	// what waits in the sink, until Lift.
	fenced    bool
	fenceLeft int // units the fence still admits
	fenceUsed bool
	fenceCost func(item T, units int) int

	// OnBackpressure, when set, is called (outside the lock) for each send
	// that had to wait in the FIFO.
	OnBackpressure func()
	// OnWait, when set, is called with the lock held for each item that
	// goes to wait in the FIFO, before Send returns: a sink that copies
	// what it accepts at once can take its hold on an item's memory only
	// for the items that outlive their Send this way.
	OnWait func(item *T)
}

// NewAdmissionGate makes a gate in front of sink.
func NewAdmissionGate[T any](sink GateSink[T], capacity int) *AdmissionGate[T] {
	if capacity < 1 {
		capacity = 1
	}
	return &AdmissionGate[T]{sink: sink, capacity: capacity}
}

// Send admits item or queues it. It returns the gate's failure once Fail was called.
func (g *AdmissionGate[T]) Send(item T, units int) (SendOutcome, error) {
	return g.SendRef(&item, units)
}

// SendRef is Send for an item the caller keeps: the gate reads *item
// during the call and copies it only into the sink or the FIFO, never
// keeps the pointer. A large item (a frame: eleven words) passed by value
// through Send, its checks and its admission was copied once per call on
// the way, which was a tenth of a small message's cost to send.
func (g *AdmissionGate[T]) SendRef(item *T, units int) (SendOutcome, error) {
	g.mu.Lock()
	if g.failed != nil {
		err := g.failed
		g.mu.Unlock()
		return SendOutcome{}, err
	}
	if g.head == len(g.pending) && g.fits(item, units) {
		g.admitLocked(item, units)
		g.mu.Unlock()
		return AdmittedOutcome, nil
	}
	adm := &Admission{done: make(chan struct{})}
	g.pending = append(g.pending, pendingItem[T]{item: *item, units: units, adm: adm})
	if g.OnWait != nil {
		g.OnWait(&g.pending[len(g.pending)-1].item)
	}
	g.mu.Unlock()
	if g.OnBackpressure != nil {
		g.OnBackpressure()
	}
	return SendOutcome{pending: adm}, nil
}

// AdmitNow admits an item of units at once, if it may enter the sink
// without waiting (nothing waits ahead of it, it fits, and no fence is up),
// by running accept with the gate's lock held: accept puts it into the
// sink itself. It reports false and runs nothing otherwise; the caller
// then sends it with Send. A sink that can take an item straight from the
// caller's memory spares the copy of the item into Send and on to Accept.
func (g *AdmissionGate[T]) AdmitNow(units int, accept func()) (bool, error) {
	return g.admitNow(units, 0, false, accept)
}

// AdmitNowCost is AdmitNow for an item that the gate's fence, when one is
// up, counts as cost (what the fence's cost function says of it; 0: the
// fence does not hold it back): the fence admits it at once as it would in
// Send. A transport's replies and acks pass the fence of a new connection,
// and a connection that carries only them is never confirmed, so its fence
// stays up until its timer lifts it; with AdmitNow, each of them took
// Send's longer path all that time.
func (g *AdmissionGate[T]) AdmitNowCost(units, cost int, accept func()) (bool, error) {
	return g.admitNow(units, cost, true, accept)
}

// admitNow is AdmitNow (passFence false: a fence that is up refuses) and
// AdmitNowCost (passFence: the fence takes cost as Send's admission does).
func (g *AdmissionGate[T]) admitNow(units, cost int, passFence bool, accept func()) (bool, error) {
	g.mu.Lock()
	if g.failed != nil {
		err := g.failed
		g.mu.Unlock()
		return false, err
	}
	fenceRefuses := g.fenced && (!passFence || (cost > 0 && g.fenceUsed && cost > g.fenceLeft))
	if g.head != len(g.pending) || fenceRefuses || (g.used != 0 && g.used+units > g.capacity) {
		g.mu.Unlock()
		return false, nil
	}
	g.used += units
	if g.fenced && cost > 0 {
		g.fenceUsed = true
		g.fenceLeft -= min(cost, g.fenceLeft)
	}
	accept()
	g.mu.Unlock()
	return true, nil
}

// Drain runs take with the gate's lock held. take removes items from the
// sink and returns how many units it removed; the gate then admits waiting
// sends, in order, while they fit.
func (g *AdmissionGate[T]) Drain(take func() int) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.used -= take()
	for g.head < len(g.pending) {
		p := &g.pending[g.head]
		if !g.fits(&p.item, p.units) {
			break
		}
		g.admitLocked(&p.item, p.units)
		// Resolve under the lock: once it is released, a new Send can be
		// admitted straight into the sink, and it must not be seen admitted
		// while an earlier send's admission still looks pending. A close
		// never blocks, and wakes its waiters only after the unlock anyway.
		close(p.adm.done)
		*p = pendingItem[T]{}
		g.head++
	}
	if g.head == len(g.pending) {
		g.pending = g.pending[:0]
		g.head = 0
	}
}

// fits reports whether an item of units may enter the sink now. The lock
// is held.
func (g *AdmissionGate[T]) fits(item *T, units int) bool {
	if g.used != 0 && g.used+units > g.capacity {
		return false
	}
	if !g.fenced {
		return true
	}
	// A fence, like the capacity, lets a first item through whatever its
	// size, so nothing is refused for being large.
	c := g.fenceCost(*item, units)
	return c == 0 || !g.fenceUsed || c <= g.fenceLeft
}

func (g *AdmissionGate[T]) admitLocked(item *T, units int) {
	g.used += units
	if g.fenced {
		if c := g.fenceCost(*item, units); c > 0 {
			g.fenceUsed = true
			g.fenceLeft -= min(c, g.fenceLeft)
		}
	}
	g.sink.Accept(*item)
}

// Fence caps what the gate admits from now on at budget in total, each
// item counting what cost says (0: the item is not fenced), until Lift:
// sends past it wait in order, as they do for a full channel, and so do
// sends behind them whatever their cost. A transport fences a new
// connection whose receiver holds the requests that arrive until the
// connection has proved whose it is, and can hold only so much.
func (g *AdmissionGate[T]) Fence(budget int, cost func(item T, units int) int) {
	g.mu.Lock()
	g.fenced, g.fenceLeft, g.fenceUsed, g.fenceCost = true, budget, false, cost
	g.mu.Unlock()
}

// Lift removes the fence and admits what waited behind it, in order, as
// far as the capacity allows. It reports whether a fence was up.
func (g *AdmissionGate[T]) Lift() bool {
	g.mu.Lock()
	was := g.fenced
	g.fenced = false
	g.mu.Unlock()
	if was {
		g.Drain(func() int { return 0 })
	}
	return was
}

// Fenced reports whether a fence is up.
func (g *AdmissionGate[T]) Fenced() bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.fenced
}

// SendFirst puts item into the sink at once, ahead of every waiting send
// and past the fence and the capacity. It is for the few small frames that
// must not wait behind others, such as the proof that lifts a receiver's
// hold; it returns the gate's failure once Fail was called.
func (g *AdmissionGate[T]) SendFirst(item T, units int) error {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.failed != nil {
		return g.failed
	}
	g.used += units
	g.sink.Accept(item)
	return nil
}

// Fail refuses later sends with err and fails every waiting send. The items
// of the failed sends are handed to drop (which may be nil) so the caller can
// report them. Items already in the sink are the sink's to fail.
func (g *AdmissionGate[T]) Fail(err error, drop func(T)) {
	if err == nil {
		err = ErrTransportClosed
	}
	g.mu.Lock()
	if g.failed == nil {
		g.failed = err
	}
	left := g.pending[g.head:]
	g.pending = nil
	g.head = 0
	g.mu.Unlock()
	for _, p := range left {
		p.adm.err = err
		close(p.adm.done)
		if drop != nil {
			drop(p.item)
		}
	}
}

// Pending is the number of sends waiting in the FIFO.
func (g *AdmissionGate[T]) Pending() int {
	g.mu.Lock()
	defer g.mu.Unlock()
	return len(g.pending) - g.head
}
