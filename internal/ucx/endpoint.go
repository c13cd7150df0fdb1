//go:build ucx

package ucx

/*
#include "shim.h"
*/
import "C"

import (
	"context"
	"fmt"
	"unsafe"
)

// EndpointID names an endpoint of one worker. IDs are never reused.
type EndpointID uint64

// endpoint is the loop's record of one ucp_ep.
type endpoint struct {
	id      EndpointID
	h       C.ucp_ep_h // nil once closed
	arg     uintptr    // the error handler's registry id
	failed  error      // set when the peer is gone; the endpoint stays failed
	closing bool       // CloseEndpoint was called
}

// usable returns the endpoint for a new operation, or why there is none.
func (l *loop) usable(id EndpointID) (*endpoint, error) {
	ep := l.eps[id]
	switch {
	case l.closing:
		return nil, ErrClosed
	case ep == nil || ep.closing:
		return nil, fmt.Errorf("%w: %d", ErrNoEndpoint, id)
	case ep.failed != nil:
		return nil, ep.failed
	}
	return ep, nil
}

// Connect creates an endpoint to the worker whose packed address is addr,
// with peer error handling: when the peer goes away, the endpoint fails,
// its outstanding and later operations fail with ErrEndpointFailed, and the
// OnEndpointError function is called.
func (w *Worker) Connect(addr []byte) (EndpointID, error) {
	if len(addr) == 0 || len(addr) > maxAddress {
		return 0, fmt.Errorf("ucx: Connect: an address of %d bytes", len(addr))
	}
	id := EndpointID(w.nextEndpoint.Add(1))
	caddr := C.CBytes(addr)
	defer C.free(caddr)
	return call(w, func(l *loop) (EndpointID, error) {
		if l.closing {
			return 0, ErrClosed
		}
		ep := &endpoint{id: id}
		ep.arg = epIDs.put(epRef{l: l, id: id})
		peer := !l.w.cfg.NoPeerErrors
		if st := C.vu_ep_create(l.worker, caddr, C.uintptr_t(ep.arg), cbool(peer), &ep.h); st != statusOK {
			epIDs.take(ep.arg)
			err := statusError(ErrEndpointFailed, "ucp_ep_create", st)
			if peer && st == C.UCS_ERR_UNREACHABLE {
				err = fmt.Errorf("%w (with peer error handling, which UCX's shared-memory transports lack: add tcp to UCX_TLS, or set Config.NoPeerErrors)", err)
			}
			return 0, err
		}
		l.eps[id] = ep
		return id, nil
	})
}

// CloseEndpoint closes ep: operations already submitted on it are
// flushed, later ones fail with ErrNoEndpoint. The close itself runs after
// the progress thread has seen its ring empty. It does not wait.
func (w *Worker) CloseEndpoint(ep EndpointID) {
	_ = w.submit(context.Background(), func(l *loop) {
		e := l.eps[ep]
		if e == nil || e.closing {
			return
		}
		e.closing = true
		l.toClose = append(l.toClose, e)
	})
}

// OnEndpointError sets the function called when an endpoint's peer is
// lost. It runs on a goroutine of its own, never on the progress thread,
// one call at a time.
func (w *Worker) OnEndpointError(fn func(ep EndpointID, err error)) {
	if fn == nil {
		w.onErr.Store(nil)
		return
	}
	w.onErr.Store(&fn)
}

//export veloUCXEpError
func veloUCXEpError(arg C.uintptr_t, st C.ucs_status_t) {
	ref, ok := epIDs.get(uintptr(arg))
	if !ok {
		return
	}
	l := ref.l
	l.w.stats.endpointErr.Add(1)
	ep := l.eps[ref.id]
	if ep == nil || ep.failed != nil || ep.h == nil {
		return
	}
	ep.failed = statusError(ErrEndpointFailed, "endpoint error handler", st)
	l.toReap = append(l.toReap, ep)
	l.w.notes.post(ep.id, ep.failed)
}

// closeEndpoints runs at the safe point, after the ring was seen empty:
// failed endpoints are force-closed (UCX completes their operations with
// an error), closed ones flush first.
func (l *loop) closeEndpoints() {
	for _, ep := range l.toReap {
		l.closeEndpoint(ep, true)
	}
	l.toReap = l.toReap[:0]
	for _, ep := range l.toClose {
		l.closeEndpoint(ep, ep.failed != nil)
		delete(l.eps, ep.id)
	}
	l.toClose = l.toClose[:0]
}

// closeEndpoint issues ucp_ep_close_nbx. It never progresses the worker:
// an unfinished close is polled by the main loop.
func (l *loop) closeEndpoint(ep *endpoint, force bool) {
	if ep.h == nil {
		return
	}
	var req unsafe.Pointer
	st := C.vu_ep_close(ep.h, cbool(force), &req)
	ep.h = nil
	if st == statusInProgress {
		l.closeReq = append(l.closeReq, closeReq{req: req, ep: ep})
		return
	}
	epIDs.take(ep.arg)
}

// pollCloses frees finished close requests; it reports whether any did.
func (l *loop) pollCloses() bool {
	kept := l.closeReq[:0]
	for _, c := range l.closeReq {
		if C.vu_request_status(c.req) == statusInProgress {
			kept = append(kept, c)
			continue
		}
		C.ucp_request_free(c.req)
		epIDs.take(c.ep.arg)
	}
	done := len(kept) != len(l.closeReq)
	clear(l.closeReq[len(kept):])
	l.closeReq = kept
	return done
}
