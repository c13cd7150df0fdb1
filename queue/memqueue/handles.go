package memqueue

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"

	"github.com/velo-go/velo/queue"
)

type sender struct {
	q *memQueue
}

func (s *sender) Send(ctx context.Context, data []byte) error {
	for {
		wait, err := s.q.put(data)
		if !errors.Is(err, queue.ErrFull) {
			return err
		}
		select {
		case <-wait:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

func (s *sender) TrySend(_ context.Context, data []byte) error {
	_, err := s.q.put(data)
	return err
}

func (s *sender) Close() error {
	s.q.close()
	return nil
}

type receiver struct {
	q    *memQueue
	once sync.Once
	done chan struct{}
}

func (r *receiver) Receive(ctx context.Context) (queue.Delivery, error) {
	for {
		select {
		case <-r.done:
			return nil, queue.ErrClosed
		default:
		}
		data, ok, wait, err := r.q.take()
		if err != nil {
			return nil, err
		}
		if ok {
			return &delivery{q: r.q, data: data}, nil
		}
		select {
		case <-wait:
		case <-r.done:
			return nil, queue.ErrClosed
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
}

func (r *receiver) Close() error {
	r.once.Do(func() { close(r.done) })
	return nil
}

type delivery struct {
	q       *memQueue
	data    []byte
	settled atomic.Bool
}

func (d *delivery) Data() []byte { return d.data }

func (d *delivery) Ack(context.Context) error {
	if !d.settled.CompareAndSwap(false, true) {
		return queue.ErrAcked
	}
	return nil
}

func (d *delivery) Nack(context.Context) error {
	if !d.settled.CompareAndSwap(false, true) {
		return queue.ErrAcked
	}
	d.q.putBack(d.data)
	return nil
}
