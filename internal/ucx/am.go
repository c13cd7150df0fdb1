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

// amHandler is one registered Active Message handler.
type amHandler struct {
	fn  func(header, data []byte)
	arg uintptr // the handler argument's registry id
}

// SetAMHandler sets fn as the handler of Active Message id (nil removes
// it). fn runs on the progress thread; header and data are valid only
// while it runs (copy what you keep), and it must not block. A
// rendezvous-mode message is refused (never reaches fn) and counted in
// Stats.RndvRefused: every sender of this binding sends eager. When
// SetAMHandler returns, messages that arrive are delivered to fn.
func (w *Worker) SetAMHandler(id uint16, fn func(header, data []byte)) {
	if w.onLoop() {
		w.l.setHandler(id, fn)
		return
	}
	_, _ = call(w, func(l *loop) (struct{}, error) {
		l.setHandler(id, fn)
		return struct{}{}, nil
	})
}

func (l *loop) setHandler(id uint16, fn func(header, data []byte)) {
	if l.closing {
		return
	}
	h, had := l.handlers[id]
	if fn == nil {
		if had {
			C.vu_set_am_handler(l.worker, C.uint(id), 0, 0)
			handlerIDs.take(h.arg)
			delete(l.handlers, id)
		}
		return
	}
	if !had {
		h.arg = handlerIDs.put(handlerRef{l: l, id: id})
		if st := C.vu_set_am_handler(l.worker, C.uint(id), C.uintptr_t(h.arg), 1); st != statusOK {
			handlerIDs.take(h.arg)
			return
		}
	}
	h.fn = fn
	l.handlers[id] = h
}

//export veloUCXAMRecv
func veloUCXAMRecv(arg C.uintptr_t, header unsafe.Pointer, hlen C.size_t, data unsafe.Pointer, dlen C.size_t, attr C.uint64_t) C.ucs_status_t {
	ref, ok := handlerIDs.get(uintptr(arg))
	if !ok {
		return statusOK
	}
	l := ref.l
	if attr&C.UCP_AM_RECV_ATTR_FLAG_RNDV != 0 {
		l.w.stats.rndvRefused.Add(1)
		return statusRefused
	}
	h, ok := l.handlers[ref.id]
	if !ok || h.fn == nil {
		return statusOK
	}
	l.deliver(h.fn, cbytes(header, hlen), cbytes(data, dlen))
	return statusOK
}

// cbytes views C memory as a slice, valid while the callback runs.
func cbytes(p unsafe.Pointer, n C.size_t) []byte {
	if p == nil || n == 0 {
		return nil
	}
	return unsafe.Slice((*byte)(p), int(n))
}

// deliver runs a handler; a panic in it must not unwind through UCX.
func (l *loop) deliver(fn func(header, data []byte), header, data []byte) {
	defer func() { _ = recover() }()
	fn(header, data)
}

// SendAM sends an Active Message with id to ep, eager (UCX's rendezvous
// is never used). header and data are pinned and must not change until
// done runs. done (which may be nil) runs on the progress thread exactly
// once, with nil or an error matching ErrEndpointFailed, ErrNoEndpoint,
// ErrSendFailed or ErrClosed; it must not block. If SendAM itself returns
// an error, the message was not queued and done does not run. Messages to
// one endpoint are posted in the order SendAM queued them.
func (w *Worker) SendAM(ep EndpointID, id uint16, header, data []byte, done func(error)) error {
	if len(header) > w.maxAMHeader {
		return fmt.Errorf("%w: a header of %d bytes, over %d", ErrSendFailed, len(header), w.maxAMHeader)
	}
	o := &op{kind: opSend, ep: ep, done: done}
	o.pinBytes(header)
	o.pinBytes(data)
	err := w.submit(context.Background(), func(l *loop) { l.post(o, id, header, data, flagEager) })
	if err != nil {
		o.pin.Unpin()
	}
	return err
}

// The send flags: velo sends eager; rendezvous only through a test seam.
const (
	flagEager = C.UCP_AM_SEND_FLAG_EAGER
	flagRndv  = C.UCP_AM_SEND_FLAG_RNDV
)

func (l *loop) post(o *op, id uint16, header, data []byte, flags C.uint32_t) {
	ep, err := l.usable(o.ep)
	if err != nil {
		o.pin.Unpin()
		if o.done != nil {
			l.callDone(o.done, err)
		}
		return
	}
	l.track(o)
	var req unsafe.Pointer
	st := C.vu_am_send(ep.h, C.uint(id), bytesPtr(header), C.size_t(len(header)),
		bytesPtr(data), C.size_t(len(data)), flags, C.uintptr_t(o.id), &req)
	switch st {
	case statusInProgress: // the callback answers
	case statusOK: // completed inline: the callback will not run
		l.settle(o, nil, true)
	default: // failed: no callback
		l.settle(o, errOf(ErrSendFailed, "ucp_am_send_nbx", st, l.failedEP(o), l.closing), true)
	}
}

// bytesPtr is b's data pointer, nil for an empty b.
func bytesPtr(b []byte) unsafe.Pointer {
	if len(b) == 0 {
		return nil
	}
	return unsafe.Pointer(unsafe.SliceData(b))
}
