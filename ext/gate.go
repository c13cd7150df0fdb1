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

	// OnBackpressure, when set, is called (outside the lock) for each send
	// that had to wait in the FIFO.
	OnBackpressure func()
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
	g.mu.Lock()
	if g.failed != nil {
		err := g.failed
		g.mu.Unlock()
		return SendOutcome{}, err
	}
	if g.head == len(g.pending) && (g.used == 0 || g.used+units <= g.capacity) {
		g.used += units
		g.sink.Accept(item)
		g.mu.Unlock()
		return AdmittedOutcome, nil
	}
	adm := &Admission{done: make(chan struct{})}
	g.pending = append(g.pending, pendingItem[T]{item: item, units: units, adm: adm})
	g.mu.Unlock()
	if g.OnBackpressure != nil {
		g.OnBackpressure()
	}
	return SendOutcome{pending: adm}, nil
}

// Drain runs take with the gate's lock held. take removes items from the
// sink and returns how many units it removed; the gate then admits waiting
// sends, in order, while they fit.
func (g *AdmissionGate[T]) Drain(take func() int) {
	g.mu.Lock()
	g.used -= take()
	var resolved []*Admission
	for g.head < len(g.pending) {
		p := &g.pending[g.head]
		if g.used != 0 && g.used+p.units > g.capacity {
			break
		}
		g.used += p.units
		g.sink.Accept(p.item)
		resolved = append(resolved, p.adm)
		*p = pendingItem[T]{}
		g.head++
	}
	if g.head == len(g.pending) {
		g.pending = g.pending[:0]
		g.head = 0
	}
	g.mu.Unlock()
	for _, a := range resolved {
		close(a.done)
	}
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
