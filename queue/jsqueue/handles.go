package jsqueue

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/velo-go/velo/queue"
)

// storeFailed is the JetStream error code of a publish the stream refused
// to store; with DiscardNew and a message limit, that means the queue is full.
const storeFailed jetstream.ErrorCode = 10077

type sender struct {
	js      jetstream.JetStream
	subject string
	closed  atomic.Bool
}

// Send waits for room as the other backends do: JetStream has no way to
// wait on a full stream, so Send tries again, backing off from 2 ms to
// 100 ms, until the item is stored or ctx is done.
func (s *sender) Send(ctx context.Context, data []byte) error {
	pause := 2 * time.Millisecond
	for {
		err := s.TrySend(ctx, data)
		if !errors.Is(err, queue.ErrFull) {
			return err
		}
		select {
		case <-time.After(pause):
		case <-ctx.Done():
			return ctx.Err()
		}
		pause = min(2*pause, 100*time.Millisecond)
	}
}

// TrySend publishes once; a full stream refuses the item with ErrFull.
func (s *sender) TrySend(ctx context.Context, data []byte) error {
	if s.closed.Load() {
		return queue.ErrClosed
	}
	_, err := s.js.Publish(ctx, s.subject, data)
	var apiErr *jetstream.APIError
	if errors.As(err, &apiErr) && apiErr.ErrorCode == storeFailed {
		return fmt.Errorf("%w: %v", queue.ErrFull, err)
	}
	return err
}

func (s *sender) Close() error {
	s.closed.Store(true)
	return nil
}

// receiver pulls items in batches. The batch in hand outlives a single
// Receive call, so a cancelled Receive loses nothing: the items stay in the
// batch for the next call. Close ends the pull; items pulled and not
// settled go back to the stream after the ack wait.
type receiver struct {
	c      jetstream.Consumer
	cfg    Config
	base   context.Context
	cancel context.CancelFunc
	mu     sync.Mutex // one Receive at a time owns batch
	batch  jetstream.MessageBatch
	stop   context.CancelFunc // releases the batch's pull context
}

func newReceiver(c jetstream.Consumer, cfg Config) *receiver {
	base, cancel := context.WithCancel(context.Background())
	return &receiver{c: c, cfg: cfg, base: base, cancel: cancel}
}

func (r *receiver) Receive(ctx context.Context) (queue.Delivery, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for {
		if r.base.Err() != nil {
			return nil, queue.ErrClosed
		}
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		if r.batch == nil {
			if err := r.pull(); err != nil {
				return nil, err
			}
		}
		select {
		case m, ok := <-r.batch.Messages():
			if ok {
				return &delivery{m: m}, nil
			}
			if err := r.endPull(); err != nil {
				return nil, err
			}
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-r.base.Done():
			return nil, queue.ErrClosed
		}
	}
}

// pull starts a pull request bounded by PullWait and by Close.
func (r *receiver) pull() error {
	fctx, cancel := context.WithTimeout(r.base, r.cfg.PullWait)
	b, err := r.c.Fetch(r.cfg.Batch, jetstream.FetchContext(fctx))
	if err != nil {
		cancel()
		if r.base.Err() != nil {
			return queue.ErrClosed
		}
		return err
	}
	r.batch, r.stop = b, cancel
	return nil
}

// endPull drops the finished pull. A pull that ran out of time is normal
// and the caller starts another; any other failure goes to the caller, so a
// broken connection cannot turn Receive into a busy loop.
func (r *receiver) endPull() error {
	err := r.batch.Error()
	r.stop()
	r.batch = nil
	switch {
	case r.base.Err() != nil:
		return queue.ErrClosed
	case err == nil, errors.Is(err, context.DeadlineExceeded), errors.Is(err, nats.ErrTimeout):
		return nil
	}
	return err
}

func (r *receiver) Close() error {
	r.cancel()
	return nil
}

type delivery struct {
	m       jetstream.Msg
	settled atomic.Bool
}

func (d *delivery) Data() []byte { return d.m.Data() }

// Ack waits for the server to confirm, so that a nil error means the item
// is gone from the stream.
func (d *delivery) Ack(ctx context.Context) error {
	if !d.settled.CompareAndSwap(false, true) {
		return queue.ErrAcked
	}
	return d.m.DoubleAck(ctx)
}

func (d *delivery) Nack(context.Context) error {
	if !d.settled.CompareAndSwap(false, true) {
		return queue.ErrAcked
	}
	return d.m.Nak()
}
