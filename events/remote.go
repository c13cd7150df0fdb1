package events

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/velo-go/velo/ext"
	"github.com/velo-go/velo/internal/msgrx"
	"github.com/velo-go/velo/internal/msgwire"
	"github.com/velo-go/velo/messenger"
)

// Names of the event system handlers. All three are drain-exempt: they
// complete or observe work already accepted and start none.
const (
	subscribeHandler      = "_event_subscribe"
	triggerHandler        = "_event_trigger"
	triggerRequestHandler = "_event_trigger_request"
)

// remote is the distributed part of a node's manager.
type remote struct {
	m   *Manager
	msg *messenger.Messenger

	// Guarded by m.mu: open subscriptions, one per remote event however
	// many local waiters it has.
	subs map[Handle]*completion

	subscribes atomic.Int64 // subscription messages sent, for tests
	// subSeq numbers this node's own subscriptions. A peer never presents
	// it: only this node reads it back, from its own undelivered message.
	subSeq   atomic.Uint64
	handled  atomic.Int64 // subscriptions and trigger requests served as owner
	recorded atomic.Int64 // of those, the ones recorded for a pending event
	refused  refusals
	closed   chan struct{}

	// The subscribers this node, as owner, will tell of a pending event,
	// one record per (subscriber, handle) and at most peerLimit per
	// subscriber: what a peer can make this node hold is bounded.
	ownMu     sync.Mutex
	owned     map[ownedSub]struct{}
	perPeer   map[ext.WorkerID]int
	peerLimit int
}

// ownedSub is one subscriber's record of one of this node's events.
type ownedSub struct {
	peer ext.WorkerID
	h    Handle
}

// DefaultPeerSubscriptionLimit is how many pending events of this node
// one remote peer may subscribe to at once, unless SetPeerSubscriptionLimit
// says otherwise.
const DefaultPeerSubscriptionLimit = 1 << 16

// refusals counts inbound event messages refused, by reason.
type refusals struct {
	notOwner, notSender, overLimit, unknown, malformed atomic.Int64
}

// Refusals counts the inbound event messages a node refused, by reason.
// A peer that forges or guesses shows up here.
type Refusals struct {
	// NotOwner: an _event_trigger (a completion) from a node other than
	// the owner of the event it names. Only the owner may complete it.
	NotOwner int64
	// NotSender: a subscription or trigger request whose body names, as
	// the node to answer, a node other than its sender.
	NotSender int64
	// OverLimit: a subscription past the sender's limit of pending
	// subscriptions here (SetPeerSubscriptionLimit).
	OverLimit int64
	// UnknownEvent: a subscription or trigger request for a handle that
	// names no event here, live or remembered. Answered at once.
	UnknownEvent int64
	// Malformed: a body that does not decode.
	Malformed int64
}

// NewDistributed makes the event manager of a node: handles carry the
// node's WorkerID, and waits on other nodes' handles go over msg.
func NewDistributed(msg *messenger.Messenger) (*Manager, error) {
	m := newManager(msg.WorkerID())
	r := &remote{
		m: m, msg: msg, subs: map[Handle]*completion{}, closed: make(chan struct{}),
		owned: map[ownedSub]struct{}{}, perPeer: map[ext.WorkerID]int{}, peerLimit: DefaultPeerSubscriptionLimit,
	}
	m.remote = r
	hs := []messenger.Handler{
		messenger.FireHandler(subscribeHandler, r.onSubscribe, messenger.WithDrainExempt()),
		messenger.FireHandler(triggerHandler, r.onTrigger, messenger.WithDrainExempt()),
		messenger.FireHandler(triggerRequestHandler, r.onTriggerRequest, messenger.WithDrainExempt()),
	}
	for _, h := range hs {
		if err := msgrx.RegisterSystem(msg, h); err != nil {
			return nil, err
		}
	}
	msgrx.WatchUndelivered(msg, subscribeHandler, r.subscribeUndelivered)
	msgrx.OnPeerLost(msg, r.ownerLost)
	return m, nil
}

// SubscribersRecorded is how many remote subscribers to this node's
// pending events it recorded (each is told once the event completes).
func (m *Manager) SubscribersRecorded() int64 {
	if m.remote == nil {
		return 0
	}
	return m.remote.recorded.Load()
}

// SubscribesHandled is how many subscriptions and trigger requests from
// other nodes this node has served as owner, whatever their outcome.
func (m *Manager) SubscribesHandled() int64 {
	if m.remote == nil {
		return 0
	}
	return m.remote.handled.Load()
}

// Refusals returns the counts of inbound event messages this node refused.
func (m *Manager) Refusals() Refusals {
	if m.remote == nil {
		return Refusals{}
	}
	f := &m.remote.refused
	return Refusals{
		NotOwner: f.notOwner.Load(), NotSender: f.notSender.Load(), OverLimit: f.overLimit.Load(),
		UnknownEvent: f.unknown.Load(), Malformed: f.malformed.Load(),
	}
}

// SetPeerSubscriptionLimit sets how many pending events of this node one
// remote peer may subscribe to at once (at least 1). A subscription past
// it is answered at once with a refusal: a Go subscriber's wait fails with
// ErrSubscriptionLimit. Subscriptions already recorded stay.
func (m *Manager) SetPeerSubscriptionLimit(n int) {
	if m.remote == nil {
		return
	}
	m.remote.ownMu.Lock()
	m.remote.peerLimit = max(n, 1)
	m.remote.ownMu.Unlock()
}

// OwnedSubscriptions is how many remote subscriptions to this node's
// pending events it holds, the number bounded per peer.
func (m *Manager) OwnedSubscriptions() int {
	if m.remote == nil {
		return 0
	}
	m.remote.ownMu.Lock()
	defer m.remote.ownMu.Unlock()
	return len(m.remote.owned)
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
		c.sub = r.subSeq.Add(1)
		r.subs[h] = c
		// The subscription runs on its own goroutine so that one waiter
		// giving up does not end it for the others; the last one to leave
		// ends it (a handshake with an owner that never answers would
		// otherwise hold that goroutine for as long as its connection
		// stays up).
		var sctx context.Context
		sctx, c.abandon = context.WithCancel(context.Background())
		go r.subscribe(sctx, h, c)
	}
	c.waiters++
	m.mu.Unlock()
	err := c.wait(ctx, h)
	m.mu.Lock()
	c.waiters--
	if c.waiters == 0 && r.subs[h] == c {
		// The last waiter gave up: the subscription goes, and a later wait
		// subscribes again. An answer the owner still sends is dropped.
		delete(r.subs, h)
		c.abandon()
	}
	m.mu.Unlock()
	return err
}

// ownerLost fails the subscriptions to a peer whose connection was lost:
// their answers will not come. A later wait subscribes again.
func (r *remote) ownerLost(peer ext.InstanceID, err error) {
	w := peer.WorkerID()
	r.m.mu.Lock()
	var lost []Handle
	for h := range r.subs {
		if h.Owner() == w {
			lost = append(lost, h)
		}
	}
	subs := make([]*completion, len(lost))
	for i, h := range lost {
		subs[i] = r.subs[h]
	}
	r.m.mu.Unlock()
	fail := func() {
		for i, h := range lost {
			r.settle(h, subs[i], false, "", fmt.Errorf("velo: wait on %s: %w", h, err))
		}
	}
	if errors.Is(err, ext.ErrPeerShutdown) {
		// An owner that shut down in order sent the completions it had;
		// they may trail the end of the connection a little.
		time.AfterFunc(msgwire.PeerShutdownGrace, fail)
		return
	}
	fail()
}

func (r *remote) subscribe(ctx context.Context, h Handle, c *completion) {
	r.subscribes.Add(1)
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	go func() {
		select {
		case <-r.closed:
			cancel()
		case <-ctx.Done():
		}
	}()
	owner, err := msgrx.ResolveWorker(r.msg, ctx, h.Owner()) // through discovery when unknown
	if err != nil {
		r.settle(h, c, false, "", fmt.Errorf("owner of %s: %w", h, err))
		return
	}
	err = r.handshake(ctx, owner)
	if err == nil {
		err = r.msg.Send(ctx, owner, subscribeHandler, mustJSON(subscribeMsg{
			Handle: handleU128(h), SubscriberWorker: uint64(r.msg.WorkerID()), SubscriberInstance: r.msg.InstanceID(), Sub: c.sub,
		}))
	}
	if err != nil {
		if r.m.closed.Load() {
			err = ErrClosed
		}
		r.settle(h, c, false, "", fmt.Errorf("velo: subscribe to %s: %w", h, err))
	}
	// Otherwise the owner's _event_trigger settles the subscription.
}

// subscribeUndelivered fails a subscription whose message a transport
// took but could not write: no answer will come for it.
func (r *remote) subscribeUndelivered(payload []byte, err error) {
	var msg subscribeMsg
	if json.Unmarshal(payload, &msg) != nil {
		return
	}
	h := msg.Handle.handle()
	r.m.mu.Lock()
	c := r.subs[h]
	r.m.mu.Unlock()
	if c != nil && c.sub == msg.Sub { // a later subscription is not this one's business
		r.settle(h, c, false, "", fmt.Errorf("velo: subscribe to %s: not sent: %w", h, err))
	}
}

// handshake makes sure the owner can answer: it answers with messages of
// its own (_event_trigger, an Ack), sent through its peer table, and the
// _hello exchange puts this node there. A draining owner refuses _hello but
// still serves events, and may know this node already (a peer registered by
// hand, or an earlier handshake), so that refusal is not an error here.
func (r *remote) handshake(ctx context.Context, owner ext.InstanceID) error {
	if err := msgrx.Handshake(r.msg, ctx, owner); err != nil && !errors.Is(err, messenger.ErrShuttingDown) {
		return err
	}
	return nil
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

// onSubscribe runs on the owner: tell the subscriber now for a completed
// (or unknown) event, or when the event completes.
//
// A subscription is its sender's: a body that names another node as the
// subscriber is refused (it would make this node answer a third party,
// and let one peer speak for another's subscriptions), and the sender's
// WorkerID keys the record.
func (r *remote) onSubscribe(c *messenger.Context) {
	var msg subscribeMsg
	if err := json.Unmarshal(c.Payload, &msg); err != nil {
		r.refused.malformed.Add(1)
		return
	}
	if !namesSender(c, msg.SubscriberWorker, msg.SubscriberInstance) {
		r.refused.notSender.Add(1)
		return
	}
	r.tellWhenDone(msg.SubscriberInstance, msg.Handle.handle())
}

// namesSender reports whether the node a body names (to be answered) is
// the node that sent it. A body that names another is refused: it would
// make this node send completions to a third party.
func namesSender(c *messenger.Context, worker uint64, instance ext.InstanceID) bool {
	return instance.WorkerID() == c.SenderWorkerID() && ext.WorkerID(worker) == c.SenderWorkerID()
}

// tellWhenDone sends target an _event_trigger for the local event of h
// once it completes: at once if it has, or if h names no event here (a
// made-up handle costs one answer and holds nothing). A pending event is
// recorded once per target, and at most peerLimit pending events per target.
func (r *remote) tellWhenDone(target ext.InstanceID, h Handle) {
	defer r.handled.Add(1)
	// A settled or unknown event (another owner's handle included) is
	// answered without taking a record, so a peer at its limit is refused
	// only what would hold memory here.
	if res, done, err := r.m.outcome(h); err != nil || done {
		r.tellOutcome(target, h, res, done, err)
		return
	}
	key := ownedSub{peer: target.WorkerID(), h: h}
	switch r.reserve(key) {
	case alreadyRecorded:
		return // that record tells the target when the event completes
	case overLimit:
		r.refused.overLimit.Add(1)
		r.notify(target, h, completionMsg{Refused: codeSubscriptionLimit, Poisoned: strPtr(true, ErrSubscriptionLimit.Error())})
		return
	}
	res, completed, err := r.m.follow(h, func(poisoned bool, reason string) {
		r.release(key)
		r.notify(target, h, completionMsg{Poisoned: strPtr(poisoned, reason)})
	})
	if err != nil || completed { // it completed since the look above
		r.release(key)
		r.tellOutcome(target, h, res, completed, err)
		return
	}
	r.recorded.Add(1)
}

// tellOutcome sends target an _event_trigger with the outcome of the
// local event of h (res when done), or says that h names no event here
// (err). Nothing is recorded; a pending event gets no answer.
func (r *remote) tellOutcome(target ext.InstanceID, h Handle, res result, done bool, err error) {
	switch {
	case err != nil:
		r.refuseUnknown(target, h)
	case done:
		r.notify(target, h, completionMsg{Poisoned: strPtr(res.poisoned, res.reason)})
	}
}

// refuseUnknown answers target that h names no event here.
func (r *remote) refuseUnknown(target ext.InstanceID, h Handle) {
	r.refused.unknown.Add(1)
	r.notify(target, h, completionMsg{Unknown: true, Poisoned: strPtr(true, "unknown event")})
}

// What reserve found.
const (
	reserved = iota
	alreadyRecorded
	overLimit
)

// reserve takes a record for key unless its peer holds one for the handle
// already or is at its limit.
func (r *remote) reserve(key ownedSub) int {
	r.ownMu.Lock()
	defer r.ownMu.Unlock()
	if _, ok := r.owned[key]; ok {
		return alreadyRecorded
	}
	if r.perPeer[key.peer] >= r.peerLimit {
		return overLimit
	}
	r.owned[key] = struct{}{}
	r.perPeer[key.peer]++
	return reserved
}

// release gives back the record of key.
func (r *remote) release(key ownedSub) {
	r.ownMu.Lock()
	defer r.ownMu.Unlock()
	if _, ok := r.owned[key]; !ok {
		return
	}
	delete(r.owned, key)
	if r.perPeer[key.peer]--; r.perPeer[key.peer] == 0 {
		delete(r.perPeer, key.peer) // a peer with no records costs nothing
	}
}

// notify sends a completion to target. It never waits for the transport
// to admit the message (Post), so completing an event never blocks on a
// stalled subscriber; a subscriber that is gone fails its own waits when
// its node stops or loses this one.
func (r *remote) notify(target ext.InstanceID, h Handle, msg completionMsg) {
	msg.Handle = handleU128(h)
	msgrx.Post(r.msg, target, triggerHandler, mustJSON(msg))
}

// onTrigger runs on a subscriber when the owner reports completion. Only
// the owner of an event completes it, so a completion from any other
// sender is refused and counted: it is a forgery (a stranger's, or a peer
// speaking for the owner). An outcome from the owner for which no
// subscription is open (the owner's courtesy copy after this node's own
// trigger request) is dropped, never cached: a later wait subscribes and
// asks the owner.
func (r *remote) onTrigger(c *messenger.Context) {
	var msg completionMsg
	if err := json.Unmarshal(c.Payload, &msg); err != nil {
		r.refused.malformed.Add(1)
		return
	}
	h := msg.Handle.handle()
	if h.Owner() != c.SenderWorkerID() {
		r.refused.notOwner.Add(1)
		return
	}
	poisoned, reason := msg.Poisoned != nil, ""
	if poisoned {
		reason = *msg.Poisoned
	}
	var err error
	switch {
	case msg.Refused == codeSubscriptionLimit:
		err = fmt.Errorf("%w (at the owner)", ErrSubscriptionLimit)
	case msg.Refused != "":
		err = fmt.Errorf("velo: wait on %s: the owner refused the subscription: %s", h, msg.Refused)
	case msg.Unknown:
		err = ErrUnknownEvent
	}
	m := r.m
	m.mu.Lock()
	sub := r.subs[h]
	m.mu.Unlock()
	if sub != nil {
		r.settle(h, sub, poisoned, reason, err)
	}
}

// codeSubscriptionLimit is the Refused code of a completion that refuses a
// subscription past the subscriber's limit.
const codeSubscriptionLimit = "subscription_limit"

// onTriggerRequest runs on the owner when another node asks it to
// complete one of its events. As the reference does, the owner then tells
// the requester how the event ended (an _event_trigger) and acknowledges to
// the response id in the body, if there is one.
//
// Any node that holds a handle may ask (the handle is the capability, and
// is random: see slot), but it asks for itself: a request whose response id
// names another node is dropped (an answer aimed at a third party), and
// one whose body names another node as the requester is refused with
// ErrNotSender at the sender's own response id.
func (r *remote) onTriggerRequest(c *messenger.Context) {
	var msg triggerRequestMsg
	if err := json.Unmarshal(c.Payload, &msg); err != nil {
		r.refused.malformed.Add(1)
		return
	}
	if msg.ResponseID != nil && msg.ResponseID.responseID().Worker() != c.SenderWorkerID() {
		r.refused.notSender.Add(1)
		return
	}
	if !namesSender(c, msg.RequesterWorker, msg.RequesterInstance) {
		r.refused.notSender.Add(1)
		if msg.ResponseID != nil {
			msgrx.Acknowledge(r.msg, msg.ResponseID.responseID(), ErrNotSender)
		}
		return
	}
	h := msg.Handle.handle()
	reason := ""
	if msg.Poisoned != nil {
		reason = *msg.Poisoned
	}
	err := r.m.complete(h, msg.Poisoned != nil, reason)
	// The event is settled now (by this request or before it), or h names
	// none: the requester's answer needs no record.
	res, done, oerr := r.m.outcome(h)
	r.tellOutcome(msg.RequesterInstance, h, res, done, oerr)
	r.handled.Add(1)
	if msg.ResponseID == nil {
		return
	}
	// complete fails with ErrAlreadyCompleted or ErrUnknownEvent, whose
	// codes and reasons the reply carries: the requester's errors.Is holds.
	msgrx.Acknowledge(r.msg, msg.ResponseID.responseID(), err)
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
	msg := m.remote.msg
	owner, err := msgrx.ResolveWorker(msg, ctx, h.Owner()) // through discovery when unknown
	if err != nil {
		return fmt.Errorf("owner of %s: %w", h, err)
	}
	if err := m.remote.handshake(ctx, owner); err != nil {
		return err
	}
	op := "event trigger"
	if poisoned {
		op = "event poison"
	}
	_, err = msgrx.FireAndAwait(msg, ctx, owner, triggerRequestHandler, func(id msgwire.ResponseID) []byte {
		rid := responseU128(id)
		return mustJSON(triggerRequestMsg{
			Handle: handleU128(h), RequesterWorker: uint64(msg.WorkerID()), RequesterInstance: msg.InstanceID(),
			Poisoned: strPtr(poisoned, reason), ResponseID: &rid,
		})
	}, msgrx.WithOp(op))
	return err
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
