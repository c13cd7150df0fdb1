package msgqueue

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"time"

	"github.com/velo-go/velo/internal/msgrx"
	"github.com/velo-go/velo/messenger"
)

// maxPoll caps how long one call to the actor waits for an item, so a
// handler never holds its worker for long.
const maxPoll = 5 * time.Second

var errUnknownRequest = errors.New("msgqueue: request names no known operation")

// ServiceConfig shapes the queues an actor owns.
type ServiceConfig struct {
	// Capacity bounds each queue (waiting plus leased items) when the
	// first request for it names none; 0 means no bound.
	Capacity int
}

// Service is the queue actor: it owns every queue of one node and serves
// them to local handles and to other nodes through Handler.
type Service struct {
	cfg     ServiceConfig
	mu      sync.Mutex
	queues  map[string]*qstate
	nextID  uint64
	changed chan struct{} // closed and replaced on every change
	closed  bool
	polling atomic.Int64 // calls waiting for an item (a test seam)
}

// Serve starts a queue actor on m and registers Handler for it.
func Serve(m *messenger.Messenger, cfg ServiceConfig) (*Service, error) {
	s := NewService(cfg)
	if err := m.Register(messenger.TypedUnaryHandler(Handler, s.serve)); err != nil {
		return nil, err
	}
	go func() { <-msgrx.Stopped(m); s.Close() }()
	return s, nil
}

// NewService returns an actor not reachable by messages: its Backend gives
// local handles only.
func NewService(cfg ServiceConfig) *Service {
	return &Service{cfg: cfg, queues: make(map[string]*qstate), changed: make(chan struct{})}
}

// Close ends the actor: calls waiting for items return, later calls fail.
func (s *Service) Close() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.closed {
		s.closed = true
		s.wakeLocked()
	}
}

func (s *Service) wakeLocked() {
	close(s.changed)
	s.changed = make(chan struct{})
}

func (s *Service) queueLocked(name string, capacity *int) *qstate {
	q := s.queues[name]
	if q == nil {
		q = &qstate{inflight: make(map[uint64]lease), capacity: s.cfg.Capacity}
		if capacity != nil {
			q.capacity = *capacity
		}
		s.queues[name] = q
	}
	return q
}

// enqueue stores data, or answers Full.
func (s *Service) enqueue(name string, data []byte, capacity *int) response {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return response{Kind: kindGone}
	}
	q := s.queueLocked(name, capacity)
	q.reclaim(time.Now())
	if q.full() {
		return response{Kind: kindFull}
	}
	q.items = append(q.items, data)
	s.wakeLocked()
	return response{Kind: kindAck}
}

// take waits up to wait for an item. With ackWait > 0 the item is leased
// (answer Leased); with 0 it leaves at once (answer Item), as the
// reference's RecvPoll does.
func (s *Service) take(ctx context.Context, name string, capacity *int, wait, ackWait time.Duration) response {
	deadline := time.Now().Add(min(wait, maxPoll))
	for {
		r, changed, next := s.tryTake(name, capacity, ackWait)
		if r.Kind != kindEmpty || !time.Now().Before(deadline) {
			return r
		}
		if next.IsZero() || next.After(deadline) {
			next = deadline
		}
		t := time.NewTimer(time.Until(next))
		s.polling.Add(1)
		select {
		case <-changed:
		case <-t.C:
		case <-ctx.Done():
			s.polling.Add(-1)
			t.Stop()
			return response{Kind: kindEmpty}
		}
		s.polling.Add(-1)
		t.Stop()
	}
}

// tryTake returns an item if there is one; otherwise Empty, the channel
// that signals a change, and the next lease deadline.
func (s *Service) tryTake(name string, capacity *int, ackWait time.Duration) (response, <-chan struct{}, time.Time) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return response{Kind: kindGone}, nil, time.Time{}
	}
	q := s.queueLocked(name, capacity)
	now := time.Now()
	next := q.reclaim(now)
	data, ok := q.pop()
	if !ok {
		return response{Kind: kindEmpty}, s.changed, next
	}
	s.wakeLocked()
	if ackWait <= 0 {
		return response{Kind: kindItem, Data: data}, nil, time.Time{}
	}
	s.nextID++
	q.inflight[s.nextID] = lease{data: data, deadline: now.Add(ackWait)}
	return response{Kind: kindLeased, ID: s.nextID, Data: data}, nil, time.Time{}
}

// settle ends a lease: the item is done, or (requeue) back at the head.
func (s *Service) settle(name string, id uint64, requeue bool) response {
	s.mu.Lock()
	defer s.mu.Unlock()
	q := s.queues[name]
	if q == nil || s.closed {
		return response{Kind: kindGone}
	}
	l, ok := q.inflight[id]
	if !ok {
		return response{Kind: kindGone}
	}
	delete(q.inflight, id)
	if requeue {
		q.items = append([][]byte{l.data}, q.items...)
	}
	s.wakeLocked()
	return response{Kind: kindAck}
}

// serve answers one call to Handler. A poll waits on the handler's
// context, which ends with the caller's deadline, its cancel or its
// connection, so no item is handed out to a caller that is gone.
func (s *Service) serve(c *messenger.Context, req request) (response, error) {
	return s.call(c.Context(), req)
}

// call answers one request, from a message or from a local handle.
func (s *Service) call(ctx context.Context, req request) (response, error) {
	switch {
	case req.Enqueue != nil:
		return s.enqueue(req.Enqueue.Queue, req.Enqueue.Data, req.Enqueue.Capacity), nil
	case req.RecvPoll != nil:
		p := req.RecvPoll
		return s.take(ctx, p.Queue, p.Capacity, ms(p.PollTimeoutMS), 0), nil
	case req.Lease != nil:
		p := req.Lease
		return s.take(ctx, p.Queue, p.Capacity, ms(p.PollTimeoutMS), max(ms(p.AckWaitMS), time.Millisecond)), nil
	case req.Settle != nil:
		return s.settle(req.Settle.Queue, req.Settle.ID, req.Settle.Requeue), nil
	}
	return response{}, errUnknownRequest
}

// ms turns a wire duration into a Duration, capped at an hour so that no
// value overflows.
func ms(v uint64) time.Duration {
	return time.Duration(min(v, 3_600_000)) * time.Millisecond
}
