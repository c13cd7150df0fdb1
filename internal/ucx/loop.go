//go:build ucx

package ucx

/*
#include "shim.h"
*/
import "C"

import (
	"time"
	"unsafe"

	"golang.org/x/sys/unix"
)

// parkTimeout is the backstop of a park: a lost wakeup costs at most this.
const parkTimeout = 100 // ms

// progressBudget bounds one burst of ucp_worker_progress calls, so that a
// busy worker still drains its ring.
const progressBudget = 64

// loop is the progress thread's state. Only the progress goroutine touches
// it (and the trampolines, which run inside its ucp_worker_progress calls).
type loop struct {
	w      *Worker
	ctx    C.ucp_context_h
	worker C.ucp_worker_h
	efd    C.int

	eps      map[EndpointID]*endpoint
	ops      map[uintptr]*op // posted and not yet answered
	mems     map[*Mem]struct{}
	handlers map[uint16]amHandler

	toClose    []*endpoint // closed by the user; closed after the ring is seen empty
	toReap     []*endpoint // failed; force-closed after the ring is seen empty
	closeReq   []closeReq  // close requests UCX has not finished
	unmaps     []*Mem      // unmaps parked on this worker's GETs
	later      []func()    // follow-up work the trampolines handed out
	stragglers []*op       // answered at teardown while UCX still held them
	closing    bool        // teardown has begun
	exit       bool
}

// closeReq is an endpoint close in progress.
type closeReq struct {
	req unsafe.Pointer
	ep  *endpoint
}

func openLoop(w *Worker) (*loop, error) {
	ctx, wk, efd, maxHdr, err := openContext(w.cfg)
	if err != nil {
		return nil, err
	}
	addr, err := workerAddress(wk)
	if err != nil {
		C.ucp_worker_destroy(wk)
		C.ucp_cleanup(ctx)
		return nil, err
	}
	w.addr, w.maxAMHeader = addr, int(maxHdr)
	return &loop{
		w: w, ctx: ctx, worker: wk, efd: efd,
		eps:      make(map[EndpointID]*endpoint),
		ops:      make(map[uintptr]*op),
		mems:     make(map[*Mem]struct{}),
		handlers: make(map[uint16]amHandler),
	}, nil
}

// run drains the ring, progresses the worker, closes endpoints at the safe
// point, and spins then parks when idle, until the Close command ends it.
func (l *loop) run() {
	st := &l.w.stats
	last := time.Now()
	idle := false // the last park ended in its timeout with nothing to do
	for !l.exit {
		st.iterations.Add(1)
		active := l.drain()
		if l.exit {
			break
		}
		if C.vu_progress(l.worker, progressBudget) != 0 {
			active = true
		}
		l.runLater()
		if l.w.ring.empty() {
			l.closeEndpoints()
		}
		if l.pollCloses() {
			active = true
		}
		if active {
			last, idle = time.Now(), false
			continue
		}
		if !idle && time.Since(last) < l.w.cfg.Spin {
			st.spins.Add(1)
			continue
		}
		switch l.park() {
		case parkWoken:
			last, idle = time.Now(), false
		case parkTimedOut:
			idle = true
		}
	}
	l.teardown()
}

// drain runs every queued command; it reports whether there were any.
func (l *loop) drain() bool {
	r := l.w.ring
	batch := r.take()
	for _, c := range batch {
		c.run(l)
		l.runLater()
	}
	r.recycle(batch)
	return len(batch) != 0
}

// runLater runs the follow-up work trampolines queued: a trampoline runs
// inside ucp_worker_progress and must not call back into UCX for work that
// can wait, nor ever push to the ring.
func (l *loop) runLater() {
	for len(l.later) != 0 {
		fns := l.later
		l.later = nil
		for _, fn := range fns {
			fn()
		}
	}
}

type parkResult int

const (
	parkBusy parkResult = iota // work arrived before the park
	parkWoken
	parkTimedOut
)

// park arms the worker and sleeps in poll(2) on the worker's fd and the
// ring's eventfd, with the backstop timeout.
func (l *loop) park() parkResult {
	r := l.w.ring
	if !r.park() {
		return parkBusy
	}
	if st := C.ucp_worker_arm(l.worker); st != statusOK {
		// BUSY: events arrived since the last progress; progress again.
		r.unpark()
		return parkBusy
	}
	l.w.stats.parks.Add(1)
	fds := []unix.PollFd{
		{Fd: int32(l.efd), Events: unix.POLLIN},
		{Fd: int32(r.bell), Events: unix.POLLIN},
	}
	n, err := unix.Poll(fds, parkTimeout)
	r.unpark()
	if fds[1].Revents != 0 {
		r.drainBell()
	}
	if n > 0 || err != nil { // EINTR counts as a wakeup
		l.w.stats.wakeups.Add(1)
		return parkWoken
	}
	return parkTimedOut
}
