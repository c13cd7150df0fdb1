//go:build ucx

package ucx

/*
#include "shim.h"
*/
import "C"

import (
	"context"
	"errors"
	"fmt"
	"os"
	"runtime"
	"sync"
	"sync/atomic"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"
)

// Config configures a Worker. Zero fields take the defaults.
type Config struct {
	// TLS is UCX_TLS for this worker when the environment sets none
	// (for example "tcp"); "" leaves UCX's default.
	TLS string
	// NetDevices is UCX_NET_DEVICES likewise.
	NetDevices string
	// Spin is how long the progress thread keeps polling after its last
	// activity before it parks; default 20 µs.
	Spin time.Duration
	// QueueDepth bounds the command ring; a submitter waits while it is
	// full. Default 1024.
	QueueDepth int
	// DrainTimeout bounds how long Close waits for outstanding operations
	// before it cancels them; default 1 s.
	DrainTimeout time.Duration
	// NoPeerErrors creates endpoints without peer error handling
	// (UCP_ERR_HANDLING_MODE_NONE): a lost peer is then never detected and
	// operations to it may wait until Close. UCX 1.13's shared-memory
	// transports (UCX_TLS=sm,self) have no peer failure handler, so
	// Connect over them works only with this set.
	NoPeerErrors bool
}

func (c *Config) fill() {
	if c.Spin <= 0 {
		c.Spin = 20 * time.Microsecond
	}
	if c.QueueDepth <= 0 {
		c.QueueDepth = 1024
	}
	if c.DrainTimeout <= 0 {
		c.DrainTimeout = time.Second
	}
}

// maxAddress bounds a packed worker address (UCX 1.13 over tcp and shared
// memory packs a few hundred bytes).
const maxAddress = 64 << 10

// Worker is one ucp_context and one ucp_worker (UCS_THREAD_MODE_SINGLE),
// owned by one progress goroutine locked to its OS thread. The UCX handles
// never leave that goroutine: every method submits a command to it through
// a bounded ring and, where it has an answer, waits for it.
type Worker struct {
	cfg          Config
	ring         *ring
	l            *loop
	addr         []byte
	maxAMHeader  int
	tid          int           // the progress thread's id
	closing      chan struct{} // closed when Close begins
	done         chan struct{} // closed when the progress goroutine has exited
	closeOnce    sync.Once
	notes        *notifier
	onErr        atomic.Pointer[func(EndpointID, error)]
	nextEndpoint atomic.Uint64
	stats        counters
}

// Stats are the progress thread's counts, for tests and diagnostics.
type Stats struct {
	Iterations  uint64 // passes of the progress loop
	Spins       uint64 // passes spent in the spin window after activity
	Parks       uint64 // times it parked in poll(2)
	Wakeups     uint64 // parks that ended with a file descriptor ready
	Doorbells   uint64 // times a submitter rang the eventfd
	RndvRefused uint64 // rendezvous-mode Active Messages refused
	Posted      uint64 // operations handed to UCX
	Inflight    int64  // operations posted to UCX and not yet answered
	EndpointErr uint64 // endpoint error handler calls
	UnmapsWait  int64  // Unmaps parked on this worker's GETs
}

type counters struct {
	iterations, spins, parks, wakeups, rndvRefused, endpointErr, posted atomic.Uint64
	inflight, unmapsWait                                                atomic.Int64
}

// NewWorker starts a worker: a UCX context with Active Messages, RMA and
// wakeup, and one single-threaded worker on a new progress thread.
// UCX_RCACHE_ENABLE defaults to n unless the environment sets it: the
// binding needs no registration cache, and without one UCX subscribes to
// no memory events, so its malloc and mmap hooks stay out of the process.
// (UCX_MEM_EVENTS itself is read when libucm loads, before any Go code
// runs: set it in the environment of the process to change it. Modifying
// it in the context's configuration only makes UCX 1.13 warn.)
func NewWorker(cfg Config) (*Worker, error) {
	cfg.fill()
	r, err := newRing(cfg.QueueDepth)
	if err != nil {
		return nil, fmt.Errorf("ucx: eventfd: %w", err)
	}
	w := &Worker{
		cfg:     cfg,
		ring:    r,
		closing: make(chan struct{}),
		done:    make(chan struct{}),
	}
	w.notes = newNotifier(w)
	started := make(chan error, 1)
	go w.progress(started)
	if err := <-started; err != nil {
		<-w.done
		w.notes.stop()
		r.shut()
		return nil, err
	}
	return w, nil
}

// progress is the progress goroutine: it owns the OS thread for its whole
// life and exits (ending the thread with it) after teardown.
func (w *Worker) progress(started chan<- error) {
	runtime.LockOSThread()
	defer close(w.done)
	w.tid = unix.Gettid()
	l, err := openLoop(w)
	if err != nil {
		started <- err
		return
	}
	w.l = l
	started <- nil
	l.run()
}

// onLoop reports whether the caller is the progress goroutine: it alone
// runs on the progress thread, which LockOSThread gives it exclusively.
func (w *Worker) onLoop() bool { return unix.Gettid() == w.tid }

// Address is the packed ucp worker address a peer passes to Connect.
func (w *Worker) Address() []byte { return append([]byte(nil), w.addr...) }

// MaxAMHeader is the largest Active Message header this worker sends.
func (w *Worker) MaxAMHeader() int { return w.maxAMHeader }

// Stats returns the progress thread's counts.
func (w *Worker) Stats() Stats {
	s := &w.stats
	w.ring.mu.Lock()
	bells := w.ring.rings
	w.ring.mu.Unlock()
	return Stats{
		Iterations:  s.iterations.Load(),
		Spins:       s.spins.Load(),
		Parks:       s.parks.Load(),
		Wakeups:     s.wakeups.Load(),
		Doorbells:   bells,
		RndvRefused: s.rndvRefused.Load(),
		Posted:      s.posted.Load(),
		Inflight:    s.inflight.Load(),
		EndpointErr: s.endpointErr.Load(),
		UnmapsWait:  s.unmapsWait.Load(),
	}
}

// call runs fn on the progress thread and waits for its answer.
func call[T any](w *Worker, fn func(l *loop) (T, error)) (T, error) {
	var zero T
	if w.onLoop() {
		return zero, ErrProgressThread
	}
	type answer struct {
		v   T
		err error
	}
	ch := make(chan answer, 1)
	err := w.submit(context.Background(), func(l *loop) {
		v, err := fn(l)
		ch <- answer{v, err}
	})
	if err != nil {
		return zero, err
	}
	a := <-ch
	return a.v, a.err
}

// envUnset reports whether the environment leaves UCX_<key> unset.
func envUnset(key string) bool {
	_, set := os.LookupEnv("UCX_" + key)
	return !set
}

// openContext creates the context and worker on the progress thread.
func openContext(cfg Config) (ctx C.ucp_context_h, wk C.ucp_worker_h, efd C.int, maxHdr C.size_t, err error) {
	var tls, dev *C.char
	if cfg.TLS != "" && envUnset("TLS") {
		tls = C.CString(cfg.TLS)
		defer C.free(unsafe.Pointer(tls))
	}
	if cfg.NetDevices != "" && envUnset("NET_DEVICES") {
		dev = C.CString(cfg.NetDevices)
		defer C.free(unsafe.Pointer(dev))
	}
	st := C.vu_context_create(tls, dev, cbool(envUnset("RCACHE_ENABLE")), &ctx)
	if st != statusOK {
		return nil, nil, 0, 0, statusError(errInit, "ucp_init", st)
	}
	if st := C.vu_worker_create(ctx, &wk, &efd, &maxHdr); st != statusOK {
		C.ucp_cleanup(ctx)
		return nil, nil, 0, 0, statusError(errInit, "ucp_worker_create", st)
	}
	return ctx, wk, efd, maxHdr, nil
}

// errInit is what a failed NewWorker wraps.
var errInit = errors.New("ucx: cannot start a worker")

func cbool(b bool) C.int {
	if b {
		return 1
	}
	return 0
}

// workerAddress packs the worker's address.
func workerAddress(wk C.ucp_worker_h) ([]byte, error) {
	buf := C.malloc(maxAddress)
	defer C.free(buf)
	var n C.size_t
	if st := C.vu_worker_address(wk, buf, maxAddress, &n); st != statusOK {
		return nil, statusError(errInit, "ucp_worker_get_address", st)
	}
	return C.GoBytes(buf, C.int(n)), nil
}
