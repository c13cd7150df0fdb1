package events_test

import (
	"context"
	"errors"
	"fmt"
	"math/big"
	"testing"
	"time"

	"github.com/velo-go/velo/events"
	"github.com/velo-go/velo/internal/msgerr"
	"github.com/velo-go/velo/internal/msgrx"
	"github.com/velo-go/velo/internal/msgwire"
)

// The tests of this file speak as a hostile peer would: a third real node,
// the stranger, sends event bodies of its own making to the victim. The
// stranger speaks as itself (its own WorkerID is the sender the victim's
// handlers see): posing as another node is stopped below the events
// package, by the messenger's binding of a connection to the worker that
// proved it. What is left for this package is to accept each message only
// from the peer the protocol names, to hold nothing for a made-up handle,
// and to bound what one peer can make a node hold.

// stranger starts a node that knows (and is known by) each of nodes.
func stranger(t *testing.T, nodes ...*testNode) *testNode {
	t.Helper()
	s := startNode(t, false)
	for _, n := range nodes {
		if err := s.RegisterPeer(n.PeerInfo()); err != nil {
			t.Fatal(err)
		}
		if err := n.RegisterPeer(s.PeerInfo()); err != nil {
			t.Fatal(err)
		}
	}
	return s
}

// u128 writes the handle or id (hi, lo) as the JSON number serde writes.
func u128(hi, lo uint64) string {
	v := new(big.Int).Lsh(new(big.Int).SetUint64(hi), 64)
	return v.Or(v, new(big.Int).SetUint64(lo)).String()
}

func handleJSON(h events.Handle) string { return u128(h.Hi, h.Lo) }

func completionBody(h events.Handle, poisoned string) []byte {
	p := "null"
	if poisoned != "" {
		p = fmt.Sprintf("%q", poisoned)
	}
	return fmt.Appendf(nil, `{"handle":%s,"poisoned":%s}`, handleJSON(h), p)
}

func subscribeBody(h events.Handle, as *testNode) []byte {
	return fmt.Appendf(nil, `{"handle":%s,"subscriber_worker":%d,"subscriber_instance":"%s"}`,
		handleJSON(h), uint64(as.WorkerID()), as.InstanceID())
}

func triggerRequestBody(h events.Handle, as *testNode, responseID string) []byte {
	return fmt.Appendf(nil, `{"handle":%s,"requester_worker":%d,"requester_instance":"%s","poisoned":null,"response_id":%s}`,
		handleJSON(h), uint64(as.WorkerID()), as.InstanceID(), responseID)
}

func send(t *testing.T, ctx context.Context, from, to *testNode, handler string, body []byte) {
	t.Helper()
	if err := from.Send(ctx, to.InstanceID(), handler, body); err != nil {
		t.Fatalf("%s to %s: %v", handler, to.InstanceID(), err)
	}
}

// pendingStill checks, without waiting, that a wait has not ended.
func pendingStill(t *testing.T, w <-chan error, what string) {
	t.Helper()
	select {
	case err := <-w:
		t.Fatalf("%s ended (%v) though nobody completed the event", what, err)
	default:
	}
}

// TestCompletionOnlyFromTheOwner: issue 20 saw a forged _event_trigger
// make a remote Wait return success on an event nobody triggered. Only
// the owner of an event (the upper 64 bits of its handle) may tell a
// subscriber how it ended: a completion, triggered or poisoned, from any
// other sender is refused and counted, the wait goes on, and the owner's
// real completion still ends it. The stranger's frames are processed in
// order on its connection, so the counter reaching 2 means both were seen.
// Without the owner check the first forgery ends the wait with success.
func TestCompletionOnlyFromTheOwner(t *testing.T) {
	ctx := testCtx(t)
	a, b := pair(t, false)
	c := stranger(t, a, b)

	e := newEvent(t, a.Events)
	w := subscribed(t, ctx, a, b, e.Handle())
	before := b.Events.Refusals().NotOwner
	send(t, ctx, c, b, "_event_trigger", completionBody(e.Handle(), ""))
	send(t, ctx, c, b, "_event_trigger", completionBody(e.Handle(), "forged poison"))
	eventually(t, "forged completions refused", func() bool { return b.Events.Refusals().NotOwner == before+2 })
	pendingStill(t, w, "the wait after forged completions")

	if err := e.Trigger(); err != nil {
		t.Fatal(err)
	}
	if err := recv(t, w, "the wait"); err != nil {
		t.Fatalf("the wait after the owner's trigger: %v", err)
	}
	// Nothing forged was cached either: the outcome is the owner's.
	if err := b.Events.Wait(ctx, e.Handle()); err != nil {
		t.Fatalf("a later wait: %v", err)
	}
}

// TestSubscriptionIsTheSenders: a subscription names the node the owner
// will answer; one that names a node other than its sender is refused and
// counted, and nothing is recorded for it (else any node could point an
// owner's completions at a third party, or speak for another's
// subscriptions).
func TestSubscriptionIsTheSenders(t *testing.T) {
	ctx := testCtx(t)
	a, b := pair(t, false)
	c := stranger(t, a, b)

	e := newEvent(t, a.Events)
	before := a.Events.Refusals().NotSender
	send(t, ctx, c, a, "_event_subscribe", subscribeBody(e.Handle(), b))
	eventually(t, "subscription for another node refused", func() bool { return a.Events.Refusals().NotSender == before+1 })
	if got := a.Events.OwnedSubscriptions(); got != 0 {
		t.Fatalf("owner holds %d subscriptions after a refused one", got)
	}
	// The stranger's own subscription is taken.
	send(t, ctx, c, a, "_event_subscribe", subscribeBody(e.Handle(), c))
	eventually(t, "the stranger's own subscription", func() bool { return a.Events.OwnedSubscriptions() == 1 })
	e.Trigger()
	eventually(t, "the record released on completion", func() bool { return a.Events.OwnedSubscriptions() == 0 })
}

// TestTriggerRequestIsTheSenders: any holder of a handle may ask the owner
// to complete its event, but only for itself. A request whose response id
// names another worker is dropped (its answer would go to a third party);
// one whose body names another node as requester is answered, at the
// sender's own response id, with ErrNotSender. Neither completes the
// event. Before the refusal was answered, the asker waited for its
// deadline.
func TestTriggerRequestIsTheSenders(t *testing.T) {
	ctx := testCtx(t)
	a, b := pair(t, false)
	c := stranger(t, a, b)
	e := newEvent(t, a.Events)
	onA := waitAsync(ctx, a.Events, e.Handle())

	before := a.Events.Refusals().NotSender
	// A response id of B's: B's WorkerID in its low half.
	send(t, ctx, c, a, "_event_trigger_request", triggerRequestBody(e.Handle(), c, u128(1, uint64(b.WorkerID()))))
	eventually(t, "a request aimed at a third party refused", func() bool { return a.Events.Refusals().NotSender == before+1 })

	short, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	_, err := msgrx.FireAndAwait(c.Messenger(), short, a.InstanceID(), "_event_trigger_request", func(id msgwire.ResponseID) []byte {
		return triggerRequestBody(e.Handle(), b, u128(id.Hi, id.Lo))
	})
	var re *msgerr.RemoteError
	if !errors.As(err, &re) || re.Reason != "event_not_sender" || !errors.Is(err, events.ErrNotSender) {
		t.Fatalf("a request naming another requester: %v, want the reason event_not_sender", err)
	}
	if got := a.Events.Refusals().NotSender; got != before+2 {
		t.Fatalf("NotSender = %d, want %d", got, before+2)
	}
	pendingStill(t, onA, "the owner's wait after refused requests")

	// The same stranger asking for itself is served: the handle is the
	// capability.
	if err := c.Events.Trigger(ctx, e.Handle()); err != nil {
		t.Fatalf("the stranger's own trigger request: %v", err)
	}
	if err := recv(t, onA, "the owner's wait"); err != nil {
		t.Fatal(err)
	}
}

// TestOwnerHoldsBoundedSubscriptionsPerPeer: what a peer can make an owner
// hold is bounded. A subscription for a handle that names no event here is
// answered at once and holds nothing; repeated subscriptions from one peer
// to one event hold one record; and past the per-peer limit a subscription
// is refused at once, the waiter's wait failing with ErrSubscriptionLimit
// (not cached: the same wait is taken once a record is free). Before the
// bound, each subscription appended a record to the event, so one peer
// grew the owner's memory without end.
func TestOwnerHoldsBoundedSubscriptionsPerPeer(t *testing.T) {
	ctx := testCtx(t)
	a, b := pair(t, false)
	c := stranger(t, a, b)

	// Made-up handles of A: each is answered, none is held.
	unknown, handled := a.Events.Refusals().UnknownEvent, a.Events.SubscribesHandled()
	const madeUp = 200
	for i := range madeUp {
		send(t, ctx, c, a, "_event_subscribe", subscribeBody(events.Handle{Hi: uint64(a.WorkerID()), Lo: uint64(i)<<32 | 1}, c))
	}
	eventually(t, "made-up handles answered", func() bool { return a.Events.SubscribesHandled() == handled+madeUp })
	if got := a.Events.Refusals().UnknownEvent - unknown; got != madeUp {
		t.Fatalf("UnknownEvent counted %d of %d made-up handles", got, madeUp)
	}
	if got := a.Events.OwnedSubscriptions(); got != 0 {
		t.Fatalf("owner holds %d subscriptions for made-up handles", got)
	}

	// One event, subscribed to over and over: one record.
	e := newEvent(t, a.Events)
	handled, recorded := a.Events.SubscribesHandled(), a.Events.SubscribersRecorded()
	const repeats = 500
	for range repeats {
		send(t, ctx, c, a, "_event_subscribe", subscribeBody(e.Handle(), c))
	}
	eventually(t, "repeated subscriptions handled", func() bool { return a.Events.SubscribesHandled() == handled+repeats })
	if got, owned := a.Events.SubscribersRecorded()-recorded, a.Events.OwnedSubscriptions(); got != 1 || owned != 1 {
		t.Fatalf("%d subscriptions to one event from one peer: %d recorded, %d held; want 1 and 1", repeats, got, owned)
	}

	// B waits on `limit` pending events; the next is refused at once.
	const limit = 4
	a.Events.SetPeerSubscriptionLimit(limit)
	var held []*events.Event
	var waits []<-chan error
	for range limit {
		ev := newEvent(t, a.Events)
		held = append(held, ev)
		waits = append(waits, subscribed(t, ctx, a, b, ev.Handle()))
	}
	if got := a.Events.OwnedSubscriptions(); got != limit+1 {
		t.Fatalf("owner holds %d subscriptions, want %d", got, limit+1)
	}
	over := newEvent(t, a.Events)
	if err := b.Events.Wait(ctx, over.Handle()); !errors.Is(err, events.ErrSubscriptionLimit) {
		t.Fatalf("a wait past the owner's limit: %v, want ErrSubscriptionLimit", err)
	}
	if got := a.Events.Refusals().OverLimit; got != 1 {
		t.Fatalf("OverLimit = %d, want 1", got)
	}
	if got := a.Events.OwnedSubscriptions(); got != limit+1 {
		t.Fatalf("owner holds %d subscriptions after the refusal, want %d", got, limit+1)
	}
	// At its limit, B is still told of events that completed: they take
	// no record.
	settled := newEvent(t, a.Events)
	settled.Poison("before the wait")
	wantPoisoned(t, b.Events.Wait(ctx, settled.Handle()), settled.Handle(), "before the wait", "a wait at the limit on a settled event")

	held[0].Trigger()
	if err := recv(t, waits[0], "first wait"); err != nil {
		t.Fatal(err)
	}
	eventually(t, "a record freed", func() bool { return a.Events.OwnedSubscriptions() == limit })
	w := subscribed(t, ctx, a, b, over.Handle()) // the refusal was not cached
	over.Trigger()
	if err := recv(t, w, "the wait refused before"); err != nil {
		t.Fatal(err)
	}
	for i, ev := range held[1:] {
		ev.Poison("done")
		wantPoisoned(t, recv(t, waits[i+1], "wait"), ev.Handle(), "done", "wait")
	}
	e.Trigger()
	eventually(t, "every record released", func() bool { return a.Events.OwnedSubscriptions() == 0 })
}

// TestHandlesAreNotGuessable: a handle is the capability a trigger request
// presents, so a node that was never given one must not name a pending
// event. Slot indexes and first generations used to be counters (slot 0,
// 1, 2... at generation 1): a stranger completed the first events of any
// node at its first guesses. Now each slot's index (31 bits, below the
// reference's local-only flag) and first generation (31 bits) are random;
// the handle keeps its layout and the owner in its upper 64 bits.
func TestHandlesAreNotGuessable(t *testing.T) {
	ctx := testCtx(t)
	a, b := pair(t, false)
	c := stranger(t, a, b)

	const n = 64
	var pending []*events.Event
	waits := make([]<-chan error, n)
	indexes := map[uint32]bool{}
	var small int
	for i := range n {
		e := newEvent(t, a.Events)
		pending = append(pending, e)
		waits[i] = waitAsync(ctx, a.Events, e.Handle())
		h := e.Handle()
		if h.Owner() != a.WorkerID() {
			t.Fatalf("handle %s does not carry its owner", h)
		}
		if h.Lo>>63 != 0 {
			t.Fatalf("handle %s sets the reference's local-only bit", h)
		}
		if uint32(h.Lo) == 0 {
			t.Fatalf("handle %s has generation 0", h)
		}
		indexes[slotOf(h)] = true
		if slotOf(h) < 1<<16 || uint32(h.Lo) < 1<<16 {
			small++
		}
	}
	if len(indexes) != n {
		t.Fatalf("%d pending events share %d slot indexes", n, len(indexes))
	}
	// A uniform 31-bit draw lands below 2^16 with probability 2^-15.
	if small > 1 {
		t.Errorf("%d of %d handles have an index or first generation below 2^16: counters?", small, n)
	}

	// The stranger's guesses in the old layout: refused as unknown, and
	// every event still pending.
	unknown := a.Events.Refusals().UnknownEvent
	for i := range uint64(2 * n) {
		guess := events.Handle{Hi: uint64(a.WorkerID()), Lo: i<<32 | 1}
		if err := c.Events.Trigger(ctx, guess); !errors.Is(err, events.ErrUnknownEvent) {
			t.Fatalf("a guessed handle %s: %v, want ErrUnknownEvent", guess, err)
		}
	}
	if got := a.Events.Refusals().UnknownEvent - unknown; got != 2*n {
		t.Errorf("UnknownEvent counted %d guesses, want %d", got, 2*n)
	}
	for i, w := range waits {
		pendingStill(t, w, fmt.Sprintf("event %d after the guesses", i))
	}
	for i, e := range pending {
		e.Trigger()
		if err := recv(t, waits[i], "wait"); err != nil {
			t.Fatal(err)
		}
	}

	// Two managers do not start from the same handle.
	x, y := newEvent(t, events.NewLocal()), newEvent(t, events.NewLocal())
	if x.Handle().Lo == y.Handle().Lo {
		t.Errorf("two managers' first handles share their lower half %#x", x.Handle().Lo)
	}
	x.Trigger()
	y.Trigger()
}
