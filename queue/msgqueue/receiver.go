package msgqueue

import (
	"context"
	"sync/atomic"

	"github.com/velo-go/velo/queue"
)

// receiver leases items one at a time. A Receive cancelled while the owner
// is choosing an item may leave that item leased to nobody; it goes to a
// receiver again after the ack wait, so nothing is lost.
type receiver struct {
	b      *Backend
	name   string
	base   context.Context // done once Close is called
	cancel context.CancelFunc
}

func (r *receiver) Receive(ctx context.Context) (queue.Delivery, error) {
	for {
		if r.base.Err() != nil {
			return nil, queue.ErrClosed
		}
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		resp, err := r.lease(ctx)
		switch {
		case r.base.Err() != nil:
			return nil, queue.ErrClosed
		case err != nil:
			return nil, err
		case resp.Kind == kindLeased:
			return &delivery{b: r.b, name: r.name, id: resp.ID, data: resp.Data}, nil
		case resp.Kind != kindEmpty:
			return nil, answerErr(resp)
		}
	}
}

// lease asks the owner for one item, waiting up to PollWait; Close or ctx
// ends the call early.
func (r *receiver) lease(ctx context.Context) (response, error) {
	cctx, cancel := context.WithCancel(ctx)
	defer cancel()
	stop := context.AfterFunc(r.base, cancel)
	defer stop()
	req := &leaseReq{
		Queue:         r.name,
		Capacity:      r.b.capacity(),
		PollTimeoutMS: uint64(r.b.cfg.PollWait.Milliseconds()),
		AckWaitMS:     uint64(r.b.cfg.AckWait.Milliseconds()),
	}
	return r.b.c.call(cctx, request{Lease: req})
}

func (r *receiver) Close() error {
	r.cancel()
	return nil
}

type delivery struct {
	b       *Backend
	name    string
	id      uint64
	data    []byte
	settled atomic.Bool
}

func (d *delivery) Data() []byte { return d.data }

func (d *delivery) Ack(ctx context.Context) error { return d.settle(ctx, false) }

func (d *delivery) Nack(ctx context.Context) error { return d.settle(ctx, true) }

func (d *delivery) settle(ctx context.Context, requeue bool) error {
	if !d.settled.CompareAndSwap(false, true) {
		return queue.ErrAcked
	}
	r, err := d.b.c.call(ctx, request{Settle: &settleReq{Queue: d.name, ID: d.id, Requeue: requeue}})
	switch {
	case err != nil:
		return err
	case r.Kind == kindAck:
		return nil
	case r.Kind == kindGone:
		return queue.ErrLeaseLost
	}
	return answerErr(r)
}
