package events

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"sync/atomic"

	"github.com/velo-go/velo/ext"
	"github.com/velo-go/velo/messenger"
)

// Names of the event system handlers. All three are drain-exempt: they
// complete or observe work already accepted and start none.
const (
	subscribeHandler      = "_event_subscribe"
	triggerHandler        = "_event_trigger"
	triggerRequestHandler = "_event_trigger_request"
)

// subscribe answers.
const (
	subPending   = 0
	subTriggered = 1
	subPoisoned  = 2
	subUnknown   = 3
)

// remote is the distributed part of a node's manager.
type remote struct {
	m   *Manager
	msg *messenger.Messenger

	// Guarded by m.mu: open subscriptions, one per remote event however
	// many local waiters it has.
	subs map[Handle]*completion

	subscribes atomic.Int64 // subscription messages sent, for tests
	closed     chan struct{}
}

// NewDistributed makes the event manager of a node: handles carry the
// node's WorkerID, and waits on other nodes' handles go over msg.
func NewDistributed(msg *messenger.Messenger) (*Manager, error) {
	m := newManager(msg.WorkerID())
	r := &remote{m: m, msg: msg, subs: map[Handle]*completion{}, closed: make(chan struct{})}
	m.remote = r
	hs := []messenger.Handler{
		messenger.UnaryHandler(subscribeHandler, r.onSubscribe, messenger.WithDrainExempt()),
		messenger.FireHandler(triggerHandler, r.onTrigger, messenger.WithDrainExempt()),
		messenger.UnaryHandler(triggerRequestHandler, r.onTriggerRequest, messenger.WithDrainExempt()),
	}
	for _, h := range hs {
		if err := msg.RegisterSystem(h); err != nil {
			return nil, err
		}
	}
	return m, nil
}

// Subscriptions is how many subscribe messages this node sent.
func (m *Manager) Subscriptions() int64 {
	if m.remote == nil {
		return 0
	}
	return m.remote.subscribes.Load()
}

// wait looks, in order, in the cache of completed events, in the open
// subscriptions, and only then subscribes to the owner.
func (r *remote) wait(ctx context.Context, h Handle) error {
	m := r.m
	m.mu.Lock()
	if res, ok := m.done.get(h); ok {
		m.mu.Unlock()
		return res.err(h)
	}
	c, ok := r.subs[h]
	if !ok {
		if m.closed.Load() {
			m.mu.Unlock()
			return ErrClosed
		}
		c = newCompletion()
		r.subs[h] = c
		// The subscription runs on its own goroutine so that one waiter
		// giving up does not end it for the others.
		go r.subscribe(h, c)
	}
	m.mu.Unlock()
	return c.wait(ctx, h)
}

func (r *remote) subscribe(h Handle, c *completion) {
	r.subscribes.Add(1)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() {
		select {
		case <-r.closed:
			cancel()
		case <-ctx.Done():
		}
	}()
	owner, ok := r.msg.InstanceOf(h.Owner())
	if !ok {
		r.settle(h, c, false, "", fmt.Errorf("%w: owner worker %s of %s", ext.ErrPeerNotRegistered, h.Owner(), h))
		return
	}
	resp, err := r.msg.Unary(ctx, owner, subscribeHandler, h.MarshalMsgpack())
	switch {
	case err != nil:
		if r.m.closed.Load() {
			err = ErrClosed
		}
		r.settle(h, c, false, "", fmt.Errorf("velo: subscribe to %s: %w", h, err))
	case len(resp) == 0:
		r.settle(h, c, false, "", fmt.Errorf("velo: subscribe to %s: empty answer", h))
	case resp[0] == subPending:
		// The owner will send _event_trigger.
	case resp[0] == subTriggered:
		r.settle(h, c, false, "", nil)
	case resp[0] == subPoisoned:
		r.settle(h, c, true, string(resp[1:]), nil)
	default:
		r.settle(h, c, false, "", ErrUnknownEvent)
	}
}

// settle ends a subscription: the outcome goes to its waiters and, unless
// the wait itself failed, to the cache.
func (r *remote) settle(h Handle, c *completion, poisoned bool, reason string, err error) {
	m := r.m
	m.mu.Lock()
	if r.subs[h] != c {
		m.mu.Unlock()
		return // already settled
	}
	delete(r.subs, h)
	if err == nil {
		m.done.put(h, poisoned, reason)
	}
	m.mu.Unlock()
	c.poisoned, c.reason, c.err = poisoned, reason, err
	close(c.done)
}

// onSubscribe runs on the owner: answer now for a completed event, or
// record the subscriber and tell it when the event completes.
func (r *remote) onSubscribe(c *messenger.Context) ([]byte, error) {
	var h Handle
	if err := h.UnmarshalMsgpack(c.Payload); err != nil {
		return nil, err
	}
	if h.Owner() != r.m.owner {
		return []byte{subUnknown}, nil // not ours: never answer "pending"
	}
	subscriber := c.SenderWorkerID()
	res, completed, err := r.m.follow(h, func(poisoned bool, reason string) {
		r.notify(subscriber, h, poisoned, reason)
	})
	switch {
	case err != nil:
		return []byte{subUnknown}, nil
	case completed:
		return outcome(res.poisoned, res.reason), nil
	}
	return []byte{subPending}, nil
}

func outcome(poisoned bool, reason string) []byte {
	if poisoned {
		return append([]byte{subPoisoned}, reason...)
	}
	return []byte{subTriggered}
}

// notify tells a subscriber that an event completed.
func (r *remote) notify(subscriber ext.WorkerID, h Handle, poisoned bool, reason string) {
	id, ok := r.msg.InstanceOf(subscriber)
	if !ok {
		return // the subscriber is gone; its waits end with its node
	}
	// Fire-and-forget: it returns once the transport took the message.
	r.msg.Send(context.Background(), id, triggerHandler, encodeOutcome(h, poisoned, reason))
}

// encodeOutcome is [16 B handle, big-endian hi then lo][u8 poisoned][reason].
func encodeOutcome(h Handle, poisoned bool, reason string) []byte {
	b := make([]byte, 0, 17+len(reason))
	b = binary.BigEndian.AppendUint64(b, h.Hi)
	b = binary.BigEndian.AppendUint64(b, h.Lo)
	p := byte(0)
	if poisoned {
		p = 1
	}
	return append(append(b, p), reason...)
}

func decodeOutcome(b []byte) (h Handle, poisoned bool, reason string, err error) {
	if len(b) < 17 || b[16] > 1 {
		return h, false, "", fmt.Errorf("%w: outcome of %d bytes", ErrMalformedHandle, len(b))
	}
	h = Handle{Hi: binary.BigEndian.Uint64(b), Lo: binary.BigEndian.Uint64(b[8:])}
	return h, b[16] == 1, string(b[17:]), nil
}

// onTrigger runs on a subscriber when the owner reports completion.
func (r *remote) onTrigger(c *messenger.Context) {
	h, poisoned, reason, err := decodeOutcome(c.Payload)
	if err != nil || h.Owner() != c.SenderWorkerID() {
		return
	}
	r.m.mu.Lock()
	sub := r.subs[h]
	r.m.mu.Unlock()
	if sub != nil {
		r.settle(h, sub, poisoned, reason, nil)
	}
}

// Answers to a trigger request.
const (
	reqDone      = 0
	reqCompleted = 1
	reqUnknown   = 2
)

// onTriggerRequest runs on the owner when another node asks it to
// complete one of its events. The answer is the acknowledgement.
func (r *remote) onTriggerRequest(c *messenger.Context) ([]byte, error) {
	h, poisoned, reason, err := decodeOutcome(c.Payload)
	if err != nil {
		return nil, err
	}
	switch err := r.m.complete(h, poisoned, reason); {
	case err == nil:
		return []byte{reqDone}, nil
	case errors.Is(err, ErrAlreadyCompleted):
		return []byte{reqCompleted}, nil
	default:
		return []byte{reqUnknown}, nil
	}
}

// Trigger completes the event of h, here or, for another node's handle, by
// asking its owner and waiting for the acknowledgement.
func (m *Manager) Trigger(ctx context.Context, h Handle) error {
	return m.completeAnywhere(ctx, h, false, "")
}

// Poison poisons the event of h, here or through its owner.
func (m *Manager) Poison(ctx context.Context, h Handle, reason string) error {
	return m.completeAnywhere(ctx, h, true, reason)
}

func (m *Manager) completeAnywhere(ctx context.Context, h Handle, poisoned bool, reason string) error {
	if h.Owner() == m.owner {
		return m.complete(h, poisoned, reason)
	}
	if m.remote == nil {
		return fmt.Errorf("%w: %s belongs to another node and this manager is local", ErrUnknownEvent, h)
	}
	owner, ok := m.remote.msg.InstanceOf(h.Owner())
	if !ok {
		return fmt.Errorf("%w: owner worker %s of %s", ext.ErrPeerNotRegistered, h.Owner(), h)
	}
	resp, err := m.remote.msg.Unary(ctx, owner, triggerRequestHandler, encodeOutcome(h, poisoned, reason))
	switch {
	case err != nil:
		return err
	case len(resp) == 1 && resp[0] == reqDone:
		return nil
	case len(resp) == 1 && resp[0] == reqCompleted:
		return fmt.Errorf("%w (at the owner)", ErrAlreadyCompleted)
	default:
		return fmt.Errorf("%w (at the owner)", ErrUnknownEvent)
	}
}

// close fails every open subscription with ErrClosed.
func (r *remote) close() {
	close(r.closed)
	m := r.m
	m.mu.Lock()
	subs := r.subs
	r.subs = map[Handle]*completion{}
	m.mu.Unlock()
	for _, c := range subs {
		c.err = ErrClosed
		close(c.done)
	}
}
