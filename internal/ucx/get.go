//go:build ucx

package ucx

/*
#include "shim.h"
*/
import "C"

import (
	"context"
	"fmt"
	"math"
	"unsafe"
)

// rkeyPad is appended to a key before ucp_ep_rkey_unpack sees it.
// ucp_ep_rkey_unpack takes no length; UCX builds whose unpack reads a
// trailer after the memory-domain entries read a system-device byte and
// distance entries until 0xFF (unknown device), so the padding ends any
// such walk inside memory the binding owns.
const rkeyPad = 8

// Get reads len(dst) bytes at remoteAddr of the peer behind ep, with the
// peer's packed key rkey, into dst. The key is checked here (ErrBadRkey:
// empty, over MaxRkeyLen, not framed as a packed key), unpacked on the
// progress thread just before ucp_get_nbx and destroyed in the completion:
// it never outlives the GET. A zero-length dst or a range that wraps is
// refused with ErrGetFailed; nothing is posted for any refusal.
//
// dst is pinned until UCX completes the GET. If ctx ends first, Get
// returns ctx.Err() and abandons only the wait: the GET runs on and may
// still write dst until it completes. Other errors match ErrGetFailed,
// ErrEndpointFailed, ErrNoEndpoint, ErrBadRkey or ErrClosed.
func (w *Worker) Get(ctx context.Context, ep EndpointID, remoteAddr uint64, rkey []byte, dst []byte) error {
	if len(dst) == 0 {
		return fmt.Errorf("%w: zero length", ErrGetFailed)
	}
	if remoteAddr == 0 || remoteAddr > math.MaxUint64-uint64(len(dst))+1 {
		return fmt.Errorf("%w: %d bytes at %#x are out of range", ErrGetFailed, len(dst), remoteAddr)
	}
	if err := checkRkey(rkey); err != nil {
		return err
	}
	if w.onLoop() {
		return ErrProgressThread
	}
	// The key gets a trailer of 0xFF: see rkeyPad.
	key := make([]byte, len(rkey)+rkeyPad)
	copy(key, rkey)
	for i := len(rkey); i < len(key); i++ {
		key[i] = 0xff
	}
	lo := uintptr(unsafe.Pointer(unsafe.SliceData(dst)))
	o := &op{kind: opGet, ep: ep, res: make(chan error, 1), dst: [2]uintptr{lo, lo + uintptr(len(dst))}}
	o.pinBytes(dst)
	if err := w.submit(ctx, func(l *loop) { l.postGet(o, remoteAddr, key, dst) }); err != nil {
		o.pin.Unpin()
		return err
	}
	select {
	case err := <-o.res:
		return err
	case <-ctx.Done():
		return ctx.Err()
	}
}

func (l *loop) postGet(o *op, raddr uint64, key, dst []byte) {
	ep, err := l.usable(o.ep)
	if err == nil && l.gatedDst(o) {
		err = fmt.Errorf("%w: the destination is in a region being unmapped", ErrGetFailed)
	}
	if err != nil {
		o.pin.Unpin()
		o.res <- err
		return
	}
	if st := C.ucp_ep_rkey_unpack(ep.h, unsafe.Pointer(unsafe.SliceData(key)), &o.rkey); st != statusOK {
		o.pin.Unpin()
		o.res <- statusError(ErrBadRkey, "ucp_ep_rkey_unpack", st)
		return
	}
	l.track(o)
	var req unsafe.Pointer
	st := C.vu_get(ep.h, bytesPtr(dst), C.size_t(len(dst)), C.uint64_t(raddr), o.rkey, C.uintptr_t(o.id), &req)
	switch st {
	case statusInProgress: // the callback answers
	case statusOK: // NO_IMM_CMPL forbids it; answer as UCX would have
		l.settle(o, nil, true)
	default:
		l.settle(o, errOf(ErrGetFailed, "ucp_get_nbx", st, l.failedEP(o), l.closing), true)
	}
}

// gatedDst reports whether o writes into a region whose Unmap waits.
func (l *loop) gatedDst(o *op) bool {
	for _, m := range l.unmaps {
		if overlaps(o.dst, m) {
			return true
		}
	}
	return false
}

// getSettled lets a parked Unmap finish once its last GET has.
func (l *loop) getSettled(o *op) {
	if len(l.unmaps) != 0 {
		l.later = append(l.later, l.tryUnmaps)
	}
}
