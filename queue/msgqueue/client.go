package msgqueue

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/velo-go/velo/ext"
	"github.com/velo-go/velo/messenger"
	"github.com/velo-go/velo/queue"
)

// Config shapes the handles of a Backend.
type Config struct {
	// Capacity is sent with every request; it bounds a queue the request
	// creates on the owner (0: the owner's default).
	Capacity int
	// AckWait is how long the owner waits for an Ack before it gives the
	// item to another receiver (default 30 s).
	AckWait time.Duration
	// PollWait bounds one wait for an item on the owner (default 1 s).
	PollWait time.Duration
}

func (c Config) withDefaults() Config {
	if c.AckWait <= 0 {
		c.AckWait = 30 * time.Second
	}
	if c.PollWait <= 0 {
		c.PollWait = time.Second
	}
	return c
}

// caller sends one request to the actor.
type caller interface {
	call(ctx context.Context, req request) (response, error)
}

type remote struct {
	m     *messenger.Messenger
	owner ext.InstanceID
}

func (r remote) call(ctx context.Context, req request) (response, error) {
	return messenger.TypedUnary[response](ctx, r.m, r.owner, Handler, req)
}

// Backend reaches the queues of one actor.
type Backend struct {
	c   caller
	cfg Config
}

// New returns a backend for the actor on node owner, reached through m.
// The owner must have called Serve.
func New(m *messenger.Messenger, owner ext.InstanceID, cfg Config) *Backend {
	return &Backend{c: remote{m, owner}, cfg: cfg.withDefaults()}
}

// Backend returns a backend whose handles call the actor directly, for
// senders and receivers on the owner's own node.
func (s *Service) Backend(cfg Config) *Backend {
	return &Backend{c: s, cfg: cfg.withDefaults()}
}

func (b *Backend) capacity() *int {
	if b.cfg.Capacity <= 0 {
		return nil
	}
	c := b.cfg.Capacity
	return &c
}

// OpenSender implements queue.Backend. The queue is made on first use.
func (b *Backend) OpenSender(_ context.Context, name string) (queue.RawSender, error) {
	return &sender{b: b, name: name}, nil
}

// OpenReceiver implements queue.Backend.
func (b *Backend) OpenReceiver(_ context.Context, name string) (queue.RawReceiver, error) {
	base, cancel := context.WithCancel(context.Background())
	return &receiver{b: b, name: name, base: base, cancel: cancel}, nil
}

// answerErr maps the answers that are not the expected one to errors.
func answerErr(r response) error {
	switch r.Kind {
	case kindFull:
		return queue.ErrFull
	case kindGone:
		return queue.ErrClosed
	}
	return fmt.Errorf("msgqueue: unexpected answer %q", r.Kind)
}

type sender struct {
	b      *Backend
	name   string
	closed atomic.Bool
}

// Send waits for room: the owner answers Full at once, so Send asks again,
// backing off from 2 ms to 100 ms, until ctx is done.
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

func (s *sender) TrySend(ctx context.Context, data []byte) error {
	if s.closed.Load() {
		return queue.ErrClosed
	}
	r, err := s.b.c.call(ctx, request{Enqueue: &enqueueReq{Queue: s.name, Data: data, Capacity: s.b.capacity()}})
	if err != nil {
		return err
	}
	if r.Kind == kindAck {
		return nil
	}
	return answerErr(r)
}

func (s *sender) Close() error {
	s.closed.Store(true)
	return nil
}
