package rendezvous

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/velo-go/velo/ext"
	"github.com/velo-go/velo/internal/rdma"
	"github.com/velo-go/velo/metrics"
	"github.com/velo-go/velo/rendezvous/internal/rdmapath"
)

// The consumer's side of an Rdma answer: check the descriptor, find a
// destination, run the GET while renewing the lease, and fall back to the
// chunked path when any of that fails. The fallback is get's: this file
// reports fellBack after recording the reason and detaching the lease.

// errOwnerLost: the owner's connection went while its GET ran.
var errOwnerLost = errors.New("rendezvous: the owner was lost during the RDMA GET")

// getRDMA serves one Rdma answer. It returns the payload, or fellBack
// (the reason recorded, the lease detached) for get to acquire again with
// no offer, or an error that ends the get: a payload over max (the handle
// released, as on the chunked path), a caller's buffer too small, or the
// caller's ctx.
func (r *Manager) getRDMA(ctx context.Context, target ext.InstanceID, h DataHandle, ra *rdmaAnswer, max int64, into []byte, tr *rdmapath.Transfer) (b []byte, fellBack bool, err error) {
	lease := leaseRequest{Handle: h, LeaseID: ra.LeaseID}
	fallBack := func(why metrics.RdmaPathReason) ([]byte, bool, error) {
		_ = tr.Fail(why) // the Rdma answer was taken, so a GET is in hand
		r.post(target, HandlerDetach, lease)
		return nil, true, nil
	}
	g, err := rdmapath.NewGrant(ra.Descriptor, r.rdma.code, max)
	if errors.Is(err, rdmapath.ErrPayloadOverLimit) {
		r.post(target, HandlerRelease, lease)
		r.met.Refused(metrics.RvGet, metrics.RvTooLarge)
		d, _ := rdmapath.Decode(ra.Descriptor)
		return nil, false, fmt.Errorf("%w: the owner states %d bytes, the limit is %d", ErrPayloadTooLarge, d.Len, max)
	}
	if err != nil {
		return fallBack(metrics.RdmaDecodeError)
	}
	d, err := g.Take()
	if err != nil || d.Len > uint64(int(^uint(0)>>1)) {
		return fallBack(metrics.RdmaDecodeError)
	}
	n := int(d.Len)
	var dst []byte
	var pb *rdma.PinnedBuf
	if into != nil {
		if n > len(into) {
			r.post(target, HandlerDetach, lease)
			return nil, false, fmt.Errorf("rendezvous: the payload of %d bytes does not fit a buffer of %d", n, len(into))
		}
		dst = into[:n]
	} else {
		if pb, err = r.rdma.reg.AllocDest(n); err != nil || pb == nil {
			return fallBack(metrics.RdmaPoolExhausted)
		}
		if len(pb.Bytes()) < n {
			pb.Release()
			return fallBack(metrics.RdmaPoolExhausted)
		}
		dst = pb.Bytes()[:n]
	}
	failed, stop := r.waitGet(ctx, target, h, ra, d, dst, pb)
	switch {
	case stop != nil:
		return nil, false, stop // the lease is detached, or will be at the GET's end
	case failed != nil:
		return fallBack(metrics.RdmaGetFailed)
	}
	if pb == nil {
		return dst, false, nil
	}
	// The pool's buffer goes back at once; the caller gets plain memory.
	out := allocDest(n)[:n]
	copy(out, dst)
	pb.Release()
	return out, false, nil
}

// getOp is one GET in flight. Its goroutine owns the destination until
// the backend answers: a caller that gives up leaves the pool buffer to
// it, and the NIC never writes into memory that went back to the pool.
type getOp struct {
	done     chan error // the backend's answer; buffered, so the goroutine never waits
	lost     chan struct{}
	lostOnce sync.Once
	pb       *rdma.PinnedBuf // nil: the destination is the caller's

	mu        sync.Mutex
	finished  bool   // the backend answered
	abandoned bool   // the caller left; the goroutine cleans up
	after     func() // run once the backend answered, when abandoned
}

// loseOwner wakes the caller of a GET whose owner went.
func (op *getOp) loseOwner() { op.lostOnce.Do(func() { close(op.lost) }) }

// abandon hands the clean-up to the GET's goroutine, or does it now when
// the backend has answered already.
func (op *getOp) abandon(after func()) {
	op.mu.Lock()
	if !op.finished {
		op.abandoned, op.after = true, after
		op.mu.Unlock()
		return
	}
	op.mu.Unlock()
	op.cleanUp(after)
}

func (op *getOp) cleanUp(after func()) {
	if op.pb != nil {
		op.pb.Release()
	}
	if after != nil {
		after()
	}
}

// run is the GET's goroutine. The backend gets a context that never ends:
// a backend's cancel abandons its wait and not the operation, so only its
// own answer proves that the NIC is done with dst.
func (r *Manager) run(ctx context.Context, op *getOp, owner ext.WorkerID, d rdmapath.Descriptor, dst []byte) {
	err := r.rdma.be.Get(context.WithoutCancel(ctx), owner, d.Addr, d.Rkey, dst)
	op.mu.Lock()
	op.finished = true
	abandoned, after := op.abandoned, op.after
	op.mu.Unlock()
	if abandoned {
		op.cleanUp(after)
		return
	}
	op.done <- err
}

// waitGet runs the GET and waits for it, renewing the lease every
// RenewEvery of the stated timeout. Into the caller's buffer (pb nil) it
// always waits for the backend's answer, even past ctx or the owner's
// loss: the buffer is the caller's again once waitGet returns. Into a pool
// buffer it returns at ctx's end, or with errOwnerLost when the owner's
// connection goes (the GET's goroutine then releases the buffer, and on
// ctx's end detaches the lease, when the backend answers). failed is a
// GET that did not complete, for the fallback; stop is ctx's end, which
// ends the get.
func (r *Manager) waitGet(ctx context.Context, target ext.InstanceID, h DataHandle, ra *rdmaAnswer, d rdmapath.Descriptor, dst []byte, pb *rdma.PinnedBuf) (failed, stop error) {
	owner := h.Owner()
	op := &getOp{done: make(chan error, 1), lost: make(chan struct{}), pb: pb}
	r.rdma.gets.add(owner, op)
	defer r.rdma.gets.remove(owner, op)
	lease := leaseRequest{Handle: h, LeaseID: ra.LeaseID}
	start := time.Now()
	go r.run(ctx, op, owner, d, dst)
	var tick <-chan time.Time
	if every := rdmapath.RenewEvery(ra.LeaseTimeoutMS); every > 0 {
		t := time.NewTicker(every)
		defer t.Stop()
		tick = t.C
	}
	lost, cancelled := op.lost, ctx.Done()
	gaveUp := false // ctx ended while the GET wrote into the caller's buffer
	for {
		select {
		case err := <-op.done:
			if err == nil {
				r.met.RdmaGetDuration(time.Since(start))
			}
			if gaveUp {
				r.post(target, HandlerDetach, lease)
				return nil, fmt.Errorf("rendezvous: RDMA GET: %w", context.Cause(ctx))
			}
			return err, nil
		case <-tick:
			r.post(target, HandlerLeaseRenew, lease)
		case <-lost:
			if pb == nil {
				lost = nil // the caller's buffer: wait for the backend
				continue
			}
			op.abandon(nil)
			return errOwnerLost, nil
		case <-cancelled:
			if pb == nil {
				cancelled, tick, gaveUp = nil, nil, true
				continue
			}
			op.abandon(func() { r.post(target, HandlerDetach, lease) })
			return nil, fmt.Errorf("rendezvous: RDMA GET: %w", context.Cause(ctx))
		}
	}
}

// getWatch finds the GETs in flight from one owner when its connection
// goes, so that their callers need not wait for the backend to notice.
type getWatch struct {
	mu      sync.Mutex
	byOwner map[ext.WorkerID]map[*getOp]struct{}
}

func (w *getWatch) add(owner ext.WorkerID, op *getOp) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.byOwner == nil {
		w.byOwner = map[ext.WorkerID]map[*getOp]struct{}{}
	}
	ops := w.byOwner[owner]
	if ops == nil {
		ops = map[*getOp]struct{}{}
		w.byOwner[owner] = ops
	}
	ops[op] = struct{}{}
}

func (w *getWatch) remove(owner ext.WorkerID, op *getOp) {
	w.mu.Lock()
	defer w.mu.Unlock()
	delete(w.byOwner[owner], op)
	if len(w.byOwner[owner]) == 0 {
		delete(w.byOwner, owner)
	}
}

// lose wakes every GET from owner.
func (w *getWatch) lose(owner ext.WorkerID) {
	w.mu.Lock()
	defer w.mu.Unlock()
	for op := range w.byOwner[owner] {
		op.loseOwner()
	}
}
