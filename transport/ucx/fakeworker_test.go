package ucx

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"
	"unsafe"
)

// An in-memory stand-in for internal/ucx's Worker, with its rules: one
// progress goroutine per worker runs every AM handler and every done
// callback; a send keeps its buffers (uncopied) until its done; a receiver
// whose handler blocks stops its progress goroutine, and so the senders'
// sends stop completing, as UCX's do over a full socket; endpoint errors
// are reported off the progress goroutine.

var (
	errFakeClosed   = errors.New("fake ucx: worker closed")
	errFakeEPFailed = errors.New("fake ucx: endpoint failed")
	errFakeNoEP     = errors.New("fake ucx: no such endpoint")
	errFakeBadKey   = errors.New("fake ucx: bad rkey")
)

type fakeNet struct {
	mu      sync.Mutex
	workers map[string]*fakeWorker
	seq     int
	mems    map[string]*fakeMem
}

func newFakeNet() *fakeNet {
	return &fakeNet{workers: map[string]*fakeWorker{}, mems: map[string]*fakeMem{}}
}

type fakeWorker struct {
	net  *fakeNet
	addr []byte

	qmu    sync.Mutex
	qcond  sync.Cond
	tasks  []func()
	qdone  bool
	exited chan struct{}

	mu       sync.Mutex
	handlers map[uint16]func(h, d []byte)
	onErr    func(endpointID, error)
	eps      map[endpointID]*fakeEP
	next     endpointID
	dead     bool
	hold     chan struct{} // while set, this worker's sends wait before delivery

	connects atomic.Int64
	closedEP atomic.Int64
	sent     atomic.Int64
	gets     atomic.Int64
	getHold  chan struct{} // while set, GETs wait for it
}

type fakeMsg struct {
	id   uint16
	h, d []byte
	done func(error)
}

type fakeEP struct {
	id   endpointID
	from *fakeWorker
	to   *fakeWorker

	mu     sync.Mutex
	cond   sync.Cond
	q      []fakeMsg
	closed bool // closed by its owner: deliver what is queued, then stop
	failed bool // failed: fail what is queued
	busy   bool
}

func (n *fakeNet) newWorker() *fakeWorker {
	n.mu.Lock()
	n.seq++
	w := &fakeWorker{net: n, addr: []byte(fmt.Sprintf("fake-worker-%d", n.seq)),
		handlers: map[uint16]func(h, d []byte){}, eps: map[endpointID]*fakeEP{}, exited: make(chan struct{})}
	n.workers[string(w.addr)] = w
	n.mu.Unlock()
	w.qcond.L = &w.qmu
	go w.progress()
	return w
}

func (w *fakeWorker) progress() {
	defer close(w.exited)
	for {
		w.qmu.Lock()
		for len(w.tasks) == 0 && !w.qdone {
			w.qcond.Wait()
		}
		if len(w.tasks) == 0 {
			w.qmu.Unlock()
			return
		}
		f := w.tasks[0]
		w.tasks = w.tasks[1:]
		w.qmu.Unlock()
		f()
	}
}

// post runs f on the progress goroutine, later; false when it has ended.
func (w *fakeWorker) post(f func()) bool {
	w.qmu.Lock()
	defer w.qmu.Unlock()
	if w.qdone {
		return false
	}
	w.tasks = append(w.tasks, f)
	w.qcond.Signal()
	return true
}

// run runs f on the progress goroutine and waits for it.
func (w *fakeWorker) run(f func()) bool {
	ran := make(chan struct{})
	if !w.post(func() { f(); close(ran) }) {
		return false
	}
	select {
	case <-ran:
		return true
	case <-w.exited:
		select {
		case <-ran:
			return true
		default:
			return false
		}
	}
}

func (w *fakeWorker) Address() []byte { return append([]byte(nil), w.addr...) }

func (w *fakeWorker) Connect(addr []byte) (endpointID, error) {
	w.mu.Lock()
	if w.dead {
		w.mu.Unlock()
		return 0, errFakeClosed
	}
	w.next++
	id := w.next
	w.net.mu.Lock()
	to := w.net.workers[string(addr)]
	w.net.mu.Unlock()
	ep := &fakeEP{id: id, from: w, to: to}
	ep.cond.L = &ep.mu
	w.eps[id] = ep
	onErr := w.onErr
	w.mu.Unlock()
	w.connects.Add(1)
	go ep.pump()
	if to == nil || to.isDead() {
		ep.fail()
		if onErr != nil {
			go onErr(id, errFakeEPFailed)
		}
	}
	return id, nil
}

func (w *fakeWorker) isDead() bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.dead
}

func (w *fakeWorker) CloseEndpoint(id endpointID) {
	w.mu.Lock()
	ep := w.eps[id]
	delete(w.eps, id)
	w.mu.Unlock()
	if ep != nil {
		w.closedEP.Add(1)
		ep.mu.Lock()
		ep.closed = true
		ep.mu.Unlock()
		ep.cond.Broadcast()
	}
}

func (w *fakeWorker) OnEndpointError(fn func(endpointID, error)) {
	w.mu.Lock()
	w.onErr = fn
	w.mu.Unlock()
}

func (w *fakeWorker) SetAMHandler(id uint16, fn func(h, d []byte)) {
	w.mu.Lock()
	w.handlers[id] = fn
	w.mu.Unlock()
}

func (w *fakeWorker) SendAM(id endpointID, am uint16, h, d []byte, done func(error)) error {
	w.mu.Lock()
	if w.dead {
		w.mu.Unlock()
		return errFakeClosed
	}
	ep := w.eps[id]
	w.mu.Unlock()
	if ep == nil {
		return errFakeNoEP
	}
	ep.mu.Lock()
	if ep.closed {
		ep.mu.Unlock()
		return errFakeNoEP
	}
	if ep.failed {
		ep.mu.Unlock()
		w.post(func() { done(errFakeEPFailed) })
		return nil
	}
	ep.q = append(ep.q, fakeMsg{id: am, h: h, d: d, done: done})
	ep.mu.Unlock()
	ep.cond.Broadcast()
	return nil
}

// pump delivers an endpoint's messages in order: each runs its handler on
// the receiver's progress goroutine, and only then is the send done.
func (ep *fakeEP) pump() {
	for {
		ep.mu.Lock()
		for len(ep.q) == 0 && !ep.closed && !ep.failed {
			ep.cond.Wait()
		}
		if len(ep.q) == 0 {
			ep.mu.Unlock()
			return
		}
		if ep.failed {
			q := ep.q
			ep.q = nil
			ep.mu.Unlock()
			for _, m := range q {
				ep.from.post(func() { m.done(errFakeEPFailed) })
			}
			continue
		}
		m := ep.q[0]
		ep.q = ep.q[1:]
		ep.busy = true
		ep.mu.Unlock()

		ep.from.mu.Lock()
		hold := ep.from.hold
		ep.from.mu.Unlock()
		if hold != nil {
			<-hold
		}
		err := ep.deliver(m)
		ep.from.sent.Add(1)
		ep.from.post(func() { m.done(err) })
		ep.mu.Lock()
		ep.busy = false
		ep.mu.Unlock()
		ep.cond.Broadcast()
	}
}

func (ep *fakeEP) deliver(m fakeMsg) error {
	to := ep.to
	to.mu.Lock()
	dead := to.dead
	h := to.handlers[m.id]
	to.mu.Unlock()
	if dead {
		return errFakeEPFailed
	}
	if h == nil {
		return nil // UCX drops an AM with no handler
	}
	if !to.run(func() { h(m.h, m.d) }) {
		return errFakeEPFailed
	}
	return nil
}

func (ep *fakeEP) fail() {
	ep.mu.Lock()
	ep.failed = true
	ep.mu.Unlock()
	ep.cond.Broadcast()
}

// setHold makes this worker's sends wait (on) or go again (off).
func (w *fakeWorker) setHold(on bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if on && w.hold == nil {
		w.hold = make(chan struct{})
	}
	if !on && w.hold != nil {
		close(w.hold)
		w.hold = nil
	}
}

// liveEPs is the number of endpoints the worker has open.
func (w *fakeWorker) liveEPs() int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return len(w.eps)
}

// Close flushes this worker's endpoints, then dies: the endpoints of other
// workers to it fail, as over a socket that closes.
func (w *fakeWorker) Close() error {
	w.mu.Lock()
	eps := make([]*fakeEP, 0, len(w.eps))
	for _, ep := range w.eps {
		eps = append(eps, ep)
	}
	w.mu.Unlock()
	flushed := make(chan struct{})
	go func() {
		defer close(flushed)
		for _, ep := range eps {
			ep.mu.Lock()
			for !(len(ep.q) == 0 && !ep.busy) && !ep.failed {
				ep.cond.Wait()
			}
			ep.mu.Unlock()
		}
	}()
	select {
	case <-flushed:
	case <-time.After(time.Second): // a bounded flush, as UCX's
	}
	w.kill()
	return nil
}

// kill is a crash: this worker stops, and every endpoint to it fails.
func (w *fakeWorker) kill() {
	w.mu.Lock()
	if w.dead {
		w.mu.Unlock()
		return
	}
	w.dead = true
	own := w.eps
	w.eps = map[endpointID]*fakeEP{}
	w.mu.Unlock()
	for _, ep := range own {
		ep.fail()
	}
	w.net.mu.Lock()
	delete(w.net.workers, string(w.addr))
	others := make([]*fakeWorker, 0, len(w.net.workers))
	for _, o := range w.net.workers {
		others = append(others, o)
	}
	w.net.mu.Unlock()
	for _, o := range others {
		o.mu.Lock()
		var hit []endpointID
		for id, ep := range o.eps {
			if ep.to == w {
				ep.fail()
				hit = append(hit, id)
			}
		}
		onErr := o.onErr
		o.mu.Unlock()
		if onErr != nil {
			for _, id := range hit {
				go onErr(id, errFakeEPFailed)
			}
		}
	}
	// Answer what is queued, then end the progress goroutine.
	w.qmu.Lock()
	w.qdone = true
	w.qmu.Unlock()
	w.qcond.Broadcast()
	<-w.exited
}

// RMA.

type fakeMem struct {
	owner *fakeWorker
	buf   []byte
	key   string
	gone  atomic.Bool
}

func (w *fakeWorker) Map(base unsafe.Pointer, n int) (memMapping, error) {
	if n <= 0 {
		return nil, errors.New("fake ucx: empty mapping")
	}
	w.net.mu.Lock()
	defer w.net.mu.Unlock()
	w.net.seq++
	m := &fakeMem{owner: w, buf: unsafe.Slice((*byte)(base), n), key: fmt.Sprintf("rkey-%d", w.net.seq)}
	w.net.mems[m.key] = m
	return m, nil
}

func (m *fakeMem) PackKey() ([]byte, error) { return []byte(m.key), nil }
func (m *fakeMem) EffectiveRange() (uintptr, int) {
	return uintptr(unsafe.Pointer(unsafe.SliceData(m.buf))), len(m.buf)
}
func (m *fakeMem) Unmap() error {
	m.gone.Store(true)
	m.owner.net.mu.Lock()
	delete(m.owner.net.mems, m.key)
	m.owner.net.mu.Unlock()
	return nil
}

func (w *fakeWorker) Get(ctx context.Context, id endpointID, addr uint64, rkey []byte, dst []byte) error {
	w.mu.Lock()
	ep := w.eps[id]
	hold := w.getHold
	w.mu.Unlock()
	if ep == nil {
		return errFakeNoEP
	}
	w.gets.Add(1)
	if hold != nil {
		select {
		case <-hold:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	w.net.mu.Lock()
	m := w.net.mems[string(rkey)]
	w.net.mu.Unlock()
	if m == nil || m.owner != ep.to || ep.to.isDead() {
		return errFakeBadKey
	}
	base := uint64(uintptr(unsafe.Pointer(unsafe.SliceData(m.buf))))
	if addr < base || addr+uint64(len(dst)) > base+uint64(len(m.buf)) {
		return errFakeBadKey
	}
	copy(dst, m.buf[addr-base:])
	return nil
}
