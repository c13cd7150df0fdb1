//go:build ucx

package ucx

/*
#include "shim.h"
*/
import "C"

import (
	"time"

	"golang.org/x/sys/unix"
)

// closeFlushTimeout bounds the flush close of the endpoints at teardown.
const closeFlushTimeout = 250 * time.Millisecond

// Close shuts the worker down. Commands already queued run; then it waits
// up to Config.DrainTimeout for outstanding operations, unmaps every
// region, closes the endpoints (flushing when nothing is outstanding,
// forcing otherwise), answers every operation still unanswered with
// ErrClosed, and destroys the worker and context. Every send's done and
// every Get is answered before Close returns. Later calls return nil.
func (w *Worker) Close() error {
	if w.onLoop() {
		return ErrProgressThread
	}
	w.closeOnce.Do(func() {
		close(w.closing)
		w.ring.close(func(l *loop) { l.closing, l.exit = true, true })
		<-w.done
		w.ring.shut()
		w.notes.stop()
	})
	return nil
}

// teardown runs on the progress thread after the exit command.
func (l *loop) teardown() {
	l.runLater()
	l.drainOps(time.Now().Add(l.w.cfg.DrainTimeout))
	for m := range l.mems {
		if !l.getsInto(m) {
			l.release(m)
		}
	}
	force := len(l.ops) != 0
	for _, ep := range l.eps {
		l.closeEndpoint(ep, force || ep.failed != nil)
	}
	l.waitCloses(time.Now().Add(closeFlushTimeout))
	for _, o := range l.ops {
		l.settle(o, ErrClosed, false)
	}
	for m := range l.mems {
		l.release(m)
	}
	for _, c := range l.closeReq {
		C.ucp_request_free(c.req)
		epIDs.take(c.ep.arg)
	}
	l.closeReq = nil
	for _, h := range l.handlers {
		handlerIDs.take(h.arg)
	}
	C.ucp_worker_destroy(l.worker)
	C.ucp_cleanup(l.ctx)
	// UCX has let go of every buffer.
	for _, o := range l.stragglers {
		o.pin.Unpin()
	}
	l.stragglers = nil
	l.runLater()
}

// drainOps progresses until no operation is outstanding or the deadline.
func (l *loop) drainOps(deadline time.Time) {
	for len(l.ops) != 0 && time.Now().Before(deadline) {
		if C.vu_progress(l.worker, progressBudget) == 0 {
			l.wait(deadline)
		}
		l.runLater()
	}
}

// waitCloses progresses until the endpoint closes finish or the deadline.
func (l *loop) waitCloses(deadline time.Time) {
	for len(l.closeReq) != 0 && time.Now().Before(deadline) {
		if C.vu_progress(l.worker, progressBudget) == 0 {
			l.wait(deadline)
		}
		l.pollCloses()
		l.runLater()
	}
}

// wait sleeps on the worker's fd until an event or 10 ms, within deadline.
func (l *loop) wait(deadline time.Time) {
	if C.ucp_worker_arm(l.worker) != statusOK {
		return
	}
	ms := min(10, int(time.Until(deadline)/time.Millisecond)+1)
	fds := []unix.PollFd{{Fd: int32(l.efd), Events: unix.POLLIN}}
	_, _ = unix.Poll(fds, ms)
}
