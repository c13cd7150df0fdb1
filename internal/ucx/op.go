//go:build ucx

package ucx

/*
#include "shim.h"
*/
import "C"

import (
	"runtime"
	"unsafe"
)

type opKind uint8

const (
	opSend opKind = iota
	opGet
)

// op is one operation posted to UCX. It owns its buffers, pinned, until
// UCX is done with them; its id rides user_data and the registry entry is
// the take-once slot of its answer.
type op struct {
	l    *loop
	id   uintptr
	kind opKind
	ep   EndpointID
	pin  runtime.Pinner

	done func(error) // a send's
	res  chan error  // a GET's, buffered
	rkey C.ucp_rkey_h
	dst  [2]uintptr // a GET's destination range [lo, hi)
}

// pinBytes pins b's backing array (nothing for an empty b).
func (o *op) pinBytes(b []byte) {
	if len(b) != 0 {
		o.pin.Pin(unsafe.SliceData(b))
	}
}

// track registers o as posted: from here its answer comes exactly once,
// from whichever of the three exits, the completion callback or the
// teardown sweep takes it from the registry first.
func (l *loop) track(o *op) {
	o.l = l
	o.id = opIDs.put(o)
	l.ops[o.id] = o
	l.w.stats.inflight.Add(1)
	l.w.stats.posted.Add(1)
}

// settle answers o if it has not been answered; release says its buffers
// may be unpinned (UCX is done with them).
func (l *loop) settle(o *op, err error, release bool) {
	if _, ok := opIDs.take(o.id); !ok {
		return
	}
	delete(l.ops, o.id)
	l.w.stats.inflight.Add(-1)
	if o.rkey != nil && release {
		C.ucp_rkey_destroy(o.rkey)
		o.rkey = nil
	}
	if release {
		o.pin.Unpin()
	} else {
		l.stragglers = append(l.stragglers, o)
	}
	switch o.kind {
	case opSend:
		if o.done != nil {
			l.callDone(o.done, err)
		}
	case opGet:
		o.res <- err
		l.getSettled(o)
	}
}

// callDone runs a send's done function; a panic in it must not unwind
// through UCX's frames.
func (l *loop) callDone(done func(error), err error) {
	defer func() { _ = recover() }()
	done(err)
}

// failedEP reports whether o's endpoint has failed.
func (l *loop) failedEP(o *op) bool {
	ep := l.eps[o.ep]
	return ep != nil && ep.failed != nil
}

//export veloUCXOpDone
func veloUCXOpDone(id C.uintptr_t, st C.ucs_status_t) {
	o, ok := opIDs.get(uintptr(id))
	if !ok {
		return // answered at teardown
	}
	l := o.l
	call, kind := "ucp_am_send_nbx", ErrSendFailed
	if o.kind == opGet {
		call, kind = "ucp_get_nbx", ErrGetFailed
	}
	l.settle(o, errOf(kind, call, st, l.failedEP(o), l.closing), true)
}
