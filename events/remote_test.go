package events_test

import (
	"context"
	"errors"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/velo-go/velo"
	"github.com/velo-go/velo/events"
	"github.com/velo-go/velo/ext"
	"github.com/velo-go/velo/transport/tcp"
)

// subscribed starts a wait on w for h, owned by owner, and returns once the
// owner has recorded w as a subscriber of the pending event (it will tell w
// with _event_trigger).
func subscribed(t *testing.T, ctx context.Context, owner, w *testNode, h events.Handle) <-chan error {
	t.Helper()
	subs, recorded := w.Events.Subscriptions(), owner.Events.SubscribersRecorded()
	ch := waitAsync(ctx, w.Events, h)
	eventually(t, "subscription recorded", func() bool { return owner.Events.SubscribersRecorded() > recorded })
	if got := w.Events.Subscriptions(); got != subs+1 {
		t.Fatalf("Subscriptions() = %d after one wait, want %d", got, subs+1)
	}
	select {
	case err := <-ch:
		t.Fatalf("wait on a pending event ended at once: %v", err)
	default:
	}
	return ch
}

// Triggering and poisoning reach a waiter on another node, with the
// reason, by _event_trigger after a pending subscription, or in the answer
// to a subscription that comes after completion.
func TestRemoteWaitTriggerAndPoison(t *testing.T) {
	ctx := testCtx(t)
	a, b := pair(t, true)

	e := newEvent(t, a.Events)
	w := subscribed(t, ctx, a, b, e.Handle())
	if err := e.Trigger(); err != nil {
		t.Fatalf("Trigger: %v", err)
	}
	if err := recv(t, w, "remote wait"); err != nil {
		t.Fatalf("remote wait on triggered event: %v", err)
	}

	p := newEvent(t, a.Events)
	w = subscribed(t, ctx, a, b, p.Handle())
	local := waitAsync(ctx, a.Events, p.Handle())
	if err := p.Poison("gpu lost"); err != nil {
		t.Fatalf("Poison: %v", err)
	}
	wantPoisoned(t, recv(t, w, "remote waiter"), p.Handle(), "gpu lost", "remote waiter")
	wantPoisoned(t, recv(t, local, "local waiter"), p.Handle(), "gpu lost", "local waiter")

	// Completed before the first remote wait: the subscription's answer
	// carries the outcome.
	q := newEvent(t, a.Events)
	q.Poison("before any wait")
	wantPoisoned(t, b.Events.Wait(ctx, q.Handle()), q.Handle(), "before any wait", "wait after poison")
	r := newEvent(t, a.Events)
	r.Trigger()
	if err := b.Events.Wait(ctx, r.Handle()); err != nil {
		t.Fatalf("wait after trigger: %v", err)
	}
}

// A merge of a local and a remote input: poisoning either one poisons the
// merged event with that reason, for waiters on both nodes; triggering both
// completes it.
func TestMergeLocalAndRemote(t *testing.T) {
	ctx := testCtx(t)
	a, b := pair(t, true)

	setup := func(t *testing.T) (local, remote *events.Event, merged events.Handle, onA, onB <-chan error) {
		local, remote = newEvent(t, a.Events), newEvent(t, b.Events)
		merged, err := a.Events.Merge(ctx, local.Handle(), remote.Handle())
		if err != nil {
			t.Fatalf("Merge: %v", err)
		}
		return local, remote, merged, waitAsync(ctx, a.Events, merged), waitAsync(ctx, b.Events, merged)
	}

	t.Run("local input poisoned", func(t *testing.T) {
		local, remote, merged, onA, onB := setup(t)
		local.Poison("weights corrupt")
		wantPoisoned(t, recv(t, onA, "merged on A"), merged, "weights corrupt", "merged on A")
		wantPoisoned(t, recv(t, onB, "merged on B"), merged, "weights corrupt", "merged on B")
		remote.Trigger()
	})

	t.Run("remote input poisoned", func(t *testing.T) {
		local, remote, merged, onA, onB := setup(t)
		local.Trigger()
		remote.Poison("tokenizer missing")
		wantPoisoned(t, recv(t, onA, "merged on A"), merged, "tokenizer missing", "merged on A")
		wantPoisoned(t, recv(t, onB, "merged on B"), merged, "tokenizer missing", "merged on B")
	})

	t.Run("both triggered", func(t *testing.T) {
		local, remote, merged, onA, onB := setup(t)
		remote.Trigger()
		stillPending(t, a.Events, merged, "merge with the local input left")
		local.Trigger()
		if err := recv(t, onA, "merged on A"); err != nil {
			t.Fatalf("merged on A: %v", err)
		}
		if err := recv(t, onB, "merged on B"); err != nil {
			t.Fatalf("merged on B: %v", err)
		}
	})

	t.Run("remote input already triggered", func(t *testing.T) {
		remote := newEvent(t, b.Events)
		remote.Trigger()
		merged, err := a.Events.Merge(ctx, remote.Handle())
		if err != nil {
			t.Fatalf("Merge: %v", err)
		}
		if err := a.Events.Wait(ctx, merged); err != nil {
			t.Fatalf("merged: %v", err)
		}
	})
}

// The second wait on a remote event that completed is answered from the
// cache: no subscription, no frame.
func TestCachedRemoteOutcomeSendsNothing(t *testing.T) {
	ctx := testCtx(t)
	a, b := pair(t, true)

	for _, poison := range []bool{false, true} {
		e := newEvent(t, a.Events)
		w := subscribed(t, ctx, a, b, e.Handle())
		want := func(err error, what string) {
			t.Helper()
			if poison {
				wantPoisoned(t, err, e.Handle(), "cached reason", what)
			} else if err != nil {
				t.Fatalf("%s: %v", what, err)
			}
		}
		if poison {
			e.Poison("cached reason")
		} else {
			e.Trigger()
		}
		want(recv(t, w, "first wait"), "first wait")

		subs, frames := b.Events.Subscriptions(), b.outboundFrames(t)
		for i := 0; i < 3; i++ {
			want(b.Events.Wait(ctx, e.Handle()), "cached wait")
		}
		if got := b.Events.Subscriptions(); got != subs {
			t.Errorf("poison=%v: cached waits made %d subscriptions", poison, got-subs)
		}
		if got := b.outboundFrames(t); got != frames {
			t.Errorf("poison=%v: cached waits sent %v frames", poison, got-frames)
		}
	}
}

// A thousand local waiters on one remote event share one subscription,
// and all wake when it completes.
func TestOneSubscriptionServesManyWaiters(t *testing.T) {
	ctx := testCtx(t)
	a, b := pair(t, false)
	e := newEvent(t, a.Events)

	const waiters = 1000
	var calling atomic.Int64
	allCalling := make(chan struct{})
	results := make(chan error, waiters)
	for i := 0; i < waiters; i++ {
		go func() {
			if calling.Add(1) == waiters {
				close(allCalling)
			}
			results <- b.Events.Wait(ctx, e.Handle())
		}()
	}
	<-allCalling
	eventually(t, "subscription sent", func() bool { return b.Events.Subscriptions() >= 1 })
	if err := e.Trigger(); err != nil {
		t.Fatalf("Trigger: %v", err)
	}
	for i := 0; i < waiters; i++ {
		if err := recv(t, results, "waiter"); err != nil {
			t.Fatalf("waiter %d: %v", i, err)
		}
	}
	if got := b.Events.Subscriptions(); got != 1 {
		t.Fatalf("%d waiters made %d subscriptions, want 1", waiters, got)
	}
}

// Another node completes an owner's event through its handle: the owner's
// waiters (and a waiter on the requesting node) wake, with the poison
// reason when the request poisons.
func TestRemoteTriggerRequest(t *testing.T) {
	ctx := testCtx(t)
	a, b := pair(t, true)

	e := newEvent(t, a.Events)
	onA := waitAsync(ctx, a.Events, e.Handle())
	onB := subscribed(t, ctx, a, b, e.Handle())
	if err := b.Events.Trigger(ctx, e.Handle()); err != nil {
		t.Fatalf("remote Trigger: %v", err)
	}
	if err := recv(t, onA, "owner's waiter"); err != nil {
		t.Fatalf("owner's waiter: %v", err)
	}
	if err := recv(t, onB, "requester's waiter"); err != nil {
		t.Fatalf("requester's waiter: %v", err)
	}

	p := newEvent(t, a.Events)
	onA = waitAsync(ctx, a.Events, p.Handle())
	if err := b.Events.Poison(ctx, p.Handle(), "cancelled by B"); err != nil {
		t.Fatalf("remote Poison: %v", err)
	}
	wantPoisoned(t, recv(t, onA, "owner's waiter"), p.Handle(), "cancelled by B", "owner's waiter")

	unknown := events.Handle{Hi: e.Handle().Hi, Lo: 7<<32 | 1<<20}
	if err := b.Events.Trigger(ctx, unknown); !errors.Is(err, events.ErrUnknownEvent) {
		t.Errorf("remote Trigger of an unknown handle: %v, want ErrUnknownEvent", err)
	}
}

// The owner refuses a request to complete an event that already completed,
// and a request through a stale handle never completes the event that now
// holds the slot.
func TestRemoteTriggerRequestRefusals(t *testing.T) {
	ctx := testCtx(t)
	a, b := pair(t, false)

	e := newEvent(t, a.Events)
	if err := b.Events.Trigger(ctx, e.Handle()); err != nil {
		t.Fatalf("remote Trigger: %v", err)
	}
	if err := b.Events.Trigger(ctx, e.Handle()); !errors.Is(err, events.ErrAlreadyCompleted) {
		t.Errorf("second remote Trigger: %v, want ErrAlreadyCompleted", err)
	}
	if err := b.Events.Poison(ctx, e.Handle(), "late"); !errors.Is(err, events.ErrAlreadyCompleted) {
		t.Errorf("remote Poison after Trigger: %v, want ErrAlreadyCompleted", err)
	}
	if err := e.Trigger(); !errors.Is(err, events.ErrAlreadyCompleted) {
		t.Errorf("owner's Trigger after remote Trigger: %v, want ErrAlreadyCompleted", err)
	}
	if err := a.Events.Wait(ctx, e.Handle()); err != nil {
		t.Errorf("owner's wait after the refusals: %v, want the first outcome (nil)", err)
	}

	p := newEvent(t, a.Events)
	if err := b.Events.Poison(ctx, p.Handle(), "first"); err != nil {
		t.Fatalf("remote Poison: %v", err)
	}
	if err := b.Events.Trigger(ctx, p.Handle()); !errors.Is(err, events.ErrAlreadyCompleted) {
		t.Errorf("remote Trigger after remote Poison: %v, want ErrAlreadyCompleted", err)
	}
	wantPoisoned(t, b.Events.Wait(ctx, p.Handle()), p.Handle(), "first", "wait after the refusal")

	// A stale handle: its slot now holds a pending event that the request
	// must not complete.
	stale := e.Handle()
	var fresh *events.Event
	for i := 0; i < 8 && fresh == nil; i++ {
		if n := newEvent(t, a.Events); slotOf(n.Handle()) == slotOf(stale) {
			fresh = n
		} else {
			defer n.Trigger()
		}
	}
	if fresh == nil {
		t.Fatal("slot not reused")
	}
	// Refused either way: the slot may remember the stale event's outcome
	// (already completed) or, after a later completion in it, not (unknown).
	refused := func(err error) bool {
		return errors.Is(err, events.ErrAlreadyCompleted) || errors.Is(err, events.ErrUnknownEvent)
	}
	if err := b.Events.Trigger(ctx, stale); !refused(err) {
		t.Errorf("remote Trigger of a stale handle: %v, want a refusal", err)
	}
	if err := b.Events.Poison(ctx, stale, "stale"); !refused(err) {
		t.Errorf("remote Poison of a stale handle: %v, want a refusal", err)
	}
	stillPending(t, a.Events, fresh.Handle(), "event in the reused slot")
	fresh.Trigger()
}

// Shutdown fails a remote wait still pending, at once, and leaves no
// goroutine behind.
func TestShutdownFailsPendingRemoteWait(t *testing.T) {
	ctx := testCtx(t)
	a, b := pair(t, true)
	e := newEvent(t, a.Events)
	w := subscribed(t, ctx, a, b, e.Handle())

	if err := shutdownWithin(b, 5*time.Second); err != nil {
		t.Fatalf("B.Shutdown: %v", err)
	}
	// The wait ends during Shutdown; allow only the waiter's wake-up.
	var err error
	select {
	case err = <-w:
	case <-time.After(time.Second):
		t.Fatal("remote wait still pending after B.Shutdown returned")
	}
	if !errors.Is(err, events.ErrClosed) && !errors.Is(err, velo.ErrShuttingDown) {
		t.Fatalf("remote wait after shutdown: %v, want ErrClosed or ErrShuttingDown", err)
	}
	if err := b.Events.Wait(ctx, e.Handle()); !errors.Is(err, events.ErrClosed) {
		t.Errorf("new remote wait after shutdown: %v, want ErrClosed", err)
	}
	if _, err := b.Events.NewEvent(); !errors.Is(err, events.ErrClosed) {
		t.Errorf("NewEvent after shutdown: %v, want ErrClosed", err)
	}
	e.Trigger() // A notifies a node that is gone: no hang, no panic
	if err := shutdownWithin(a, 5*time.Second); err != nil {
		t.Fatalf("A.Shutdown: %v", err)
	}
	goleak.VerifyNone(t)
}

// An owner's event dropped without completion poisons the wait of a
// remote node too.
func TestDroppedEventPoisonsRemoteWaiter(t *testing.T) {
	ctx := testCtx(t)
	a, b := pair(t, false)
	h := droppedEvent(t, a.Events)
	// The collector may take the event before or after B's subscription
	// reaches A; the poison comes in the answer or in the notice.
	waitForDropPoison(t, waitAsync(ctx, b.Events, h), h, "remote waiter")
}

// The book's drain exemption: an owner that drains still answers
// _event_subscribe and _event_trigger_request, and its triggers still
// reach waiters on other nodes; a waiter's node that drains still takes
// _event_trigger.
func TestEventsDuringDrain(t *testing.T) {
	t.Run("owner drains", func(t *testing.T) {
		ctx := testCtx(t)
		a, b := pair(t, true)
		if err := a.Register(velo.UnaryHandler("work", func(*velo.Context) ([]byte, error) { return nil, nil })); err != nil {
			t.Fatal(err)
		}
		e, other := newEvent(t, a.Events), newEvent(t, a.Events)
		a.BeginDrain()
		// The drain is on: new work is refused.
		if _, err := b.Unary(ctx, a.InstanceID(), "work", nil); !errors.Is(err, velo.ErrShuttingDown) {
			t.Fatalf("new work to a draining owner: %v, want ErrShuttingDown", err)
		}
		w := subscribed(t, ctx, a, b, e.Handle()) // _event_subscribe answered
		if err := e.Trigger(); err != nil {
			t.Fatalf("Trigger during drain: %v", err)
		}
		if err := recv(t, w, "waiter on the draining owner's event"); err != nil {
			t.Fatalf("waiter on the draining owner's event: %v", err)
		}
		// _event_trigger_request answered.
		onA := waitAsync(ctx, a.Events, other.Handle())
		if err := b.Events.Trigger(ctx, other.Handle()); err != nil {
			t.Fatalf("trigger request to a draining owner: %v", err)
		}
		if err := recv(t, onA, "owner's waiter"); err != nil {
			t.Fatalf("owner's waiter: %v", err)
		}
	})

	t.Run("waiter drains", func(t *testing.T) {
		ctx := testCtx(t)
		a, b := pair(t, true)
		e := newEvent(t, a.Events)
		w := subscribed(t, ctx, a, b, e.Handle())
		b.BeginDrain()
		if err := e.Trigger(); err != nil {
			t.Fatalf("Trigger: %v", err)
		}
		if err := recv(t, w, "waiter on a draining node"); err != nil {
			t.Fatalf("waiter on a draining node: %v", err)
		}
		// Sending is not gated: the draining node can still subscribe.
		p := newEvent(t, a.Events)
		w = subscribed(t, ctx, a, b, p.Handle())
		p.Poison("done")
		wantPoisoned(t, recv(t, w, "second waiter"), p.Handle(), "done", "second waiter")
	})
}

// Waits, triggers and poisons racing from both nodes: each event ends
// exactly once and every waiter sees the single outcome.
func TestConcurrentRemoteCompletion(t *testing.T) {
	ctx := testCtx(t)
	a, b := pair(t, false)
	const n = 100
	var wg sync.WaitGroup
	for i := 0; i < n; i++ {
		e := newEvent(t, a.Events)
		h := e.Handle()
		var wins atomic.Int32
		wg.Add(4)
		go func() {
			defer wg.Done()
			if e.Trigger() == nil {
				wins.Add(1)
			}
		}()
		go func() {
			defer wg.Done()
			if b.Events.Poison(ctx, h, "racer") == nil {
				wins.Add(1)
			}
		}()
		var outcomes [2]error
		go func() { defer wg.Done(); outcomes[0] = b.Events.Wait(ctx, h) }()
		go func() { defer wg.Done(); outcomes[1] = a.Events.Wait(ctx, h) }()
		wg.Wait()
		if wins.Load() != 1 {
			t.Fatalf("event %d completed %d times", i, wins.Load())
		}
		if (outcomes[0] == nil) != (outcomes[1] == nil) {
			t.Fatalf("event %d: waiters disagree: B %v, A %v", i, outcomes[0], outcomes[1])
		}
		for _, err := range outcomes {
			if err != nil && !errors.Is(err, events.ErrPoisoned) {
				t.Fatalf("event %d: wait: %v", i, err)
			}
		}
	}
}

// Waits and completions that cannot reach an owner fail with a clear error
// instead of waiting; the failure is not cached, so a later wait tries again.
func TestUnreachableOrUnknownOwner(t *testing.T) {
	ctx := testCtx(t)
	a, b := pair(t, false)
	stranger := events.Handle{Hi: uint64(a.WorkerID()) ^ 0x5a5a, Lo: 1}

	if err := b.Events.Wait(ctx, stranger); !errors.Is(err, velo.ErrPeerNotRegistered) {
		t.Errorf("wait on an unregistered owner: %v, want ErrPeerNotRegistered", err)
	}
	if err := b.Events.Trigger(ctx, stranger); !errors.Is(err, velo.ErrPeerNotRegistered) {
		t.Errorf("trigger through an unregistered owner: %v, want ErrPeerNotRegistered", err)
	}
	merged, err := b.Events.Merge(ctx, stranger)
	if err != nil {
		t.Fatalf("Merge: %v", err)
	}
	if err := b.Events.Wait(ctx, merged); !errors.Is(err, events.ErrPoisoned) {
		t.Errorf("merge of an unreachable input: %v, want poisoned", err)
	}

	unknown := events.Handle{Hi: uint64(a.WorkerID()), Lo: 5<<32 | 1<<24}
	for i := 0; i < 2; i++ { // not cached: both go to the owner
		if err := b.Events.Wait(ctx, unknown); !errors.Is(err, events.ErrUnknownEvent) {
			t.Errorf("wait %d on an unknown event of a known owner: %v, want ErrUnknownEvent", i, err)
		}
	}
	if got := b.Events.Subscriptions(); got != 4 {
		t.Errorf("Subscriptions() = %d, want 4 (one per failed wait, the merge's included; none cached)", got)
	}
}

// A local manager knows only its own events.
func TestLocalManagerRefusesForeignHandles(t *testing.T) {
	ctx := testCtx(t)
	m, other := events.NewLocal(), events.NewLocal()
	e := newEvent(t, other)
	if e.Handle().Owner() != other.Owner() || m.Owner() == other.Owner() {
		t.Fatalf("owners: handle %v, managers %v and %v", e.Handle().Owner(), other.Owner(), m.Owner())
	}
	if err := m.Wait(ctx, e.Handle()); !errors.Is(err, events.ErrUnknownEvent) {
		t.Errorf("Wait on a foreign handle: %v, want ErrUnknownEvent", err)
	}
	if err := m.Trigger(ctx, e.Handle()); !errors.Is(err, events.ErrUnknownEvent) {
		t.Errorf("Trigger of a foreign handle: %v, want ErrUnknownEvent", err)
	}
	if m.Subscriptions() != 0 {
		t.Errorf("a local manager counts %d subscriptions", m.Subscriptions())
	}
	e.Poison("reason text")
	err := other.Wait(ctx, e.Handle())
	if msg := err.Error(); !strings.Contains(msg, "reason text") || !strings.Contains(msg, e.Handle().String()) {
		t.Errorf("PoisonedError text %q lacks the reason or the handle", msg)
	}
	m.Close()
	if _, err := m.NewEvent(); !errors.Is(err, events.ErrClosed) {
		t.Errorf("NewEvent after Close: %v, want ErrClosed", err)
	}
	if _, err := m.Merge(context.Background()); !errors.Is(err, events.ErrClosed) {
		t.Errorf("Merge after Close: %v, want ErrClosed", err)
	}
}

// A refusal by the owner keeps its identity across the wire: a trigger
// request for an event that already completed is ErrAlreadyCompleted, one
// for a handle the owner never made is ErrUnknownEvent, and a remote wait
// on such a handle fails with ErrUnknownEvent at once, not at its deadline.
func TestRemoteRefusalsKeepTheirIdentity(t *testing.T) {
	ctx := testCtx(t)
	a, b := pair(t, true)

	e := newEvent(t, a.Events)
	if err := e.Trigger(); err != nil {
		t.Fatal(err)
	}
	if err := b.Events.Trigger(ctx, e.Handle()); !errors.Is(err, events.ErrAlreadyCompleted) {
		t.Errorf("remote Trigger of a completed event: %v, want ErrAlreadyCompleted", err)
	}
	never := events.Handle{Hi: e.Handle().Hi, Lo: 1<<40 | 1} // slot 256 was never made
	if err := b.Events.Poison(ctx, never, "x"); !errors.Is(err, events.ErrUnknownEvent) {
		t.Errorf("remote Poison of an unknown handle: %v, want ErrUnknownEvent", err)
	}
	if err := b.Events.Wait(ctx, never); !errors.Is(err, events.ErrUnknownEvent) {
		t.Errorf("remote Wait on an unknown handle: %v, want ErrUnknownEvent", err)
	}
}

// A subscription whose message the transport took but could not write
// fails its waiters at once, and a later wait subscribes again rather than
// joining a subscription that will never be answered. The subscribe message
// is fire-and-forget, as in the reference, so the failure comes through the
// messenger's undelivered hook. The route to the owner is pointed at a
// closed port after the handshake, so the write fails every time (a write
// to a peer that just died may still land in a socket buffer; noticing that
// is the transport's peer-loss detection, not this hook).
func TestUndeliveredSubscriptionFailsAtOnce(t *testing.T) {
	ctx := testCtx(t)
	a, b := pair(t, true)
	first := newEvent(t, a.Events)
	w := subscribed(t, ctx, a, b, first.Handle()) // the handshake is done
	first.Trigger()
	if err := recv(t, w, "first wait"); err != nil {
		t.Fatal(err)
	}
	// Port 1 on loopback: nothing listens there, and unlike a port just
	// closed, no other test's listener can take it meanwhile.
	const closed = "127.0.0.1:1"
	if err := b.tr.Register(ext.PeerInfo{InstanceID: a.InstanceID(), Address: ext.WorkerAddress{tcp.Key: []byte(closed)}}); err != nil {
		t.Fatal(err)
	}
	pending := newEvent(t, a.Events)
	for i := range 2 {
		subs := b.Events.Subscriptions()
		ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		err := b.Events.Wait(ctx, pending.Handle())
		cancel()
		if err == nil || errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("wait %d through a refused route: %v, want a send failure before the deadline", i, err)
		}
		if got := b.Events.Subscriptions(); got != subs+1 {
			t.Fatalf("wait %d sent %d subscriptions, want 1", i, got-subs)
		}
	}
}

// A subscription goes when its last waiter gives up: a later wait
// subscribes again instead of joining one nobody waits on.
func TestSubscriptionGoesWithItsLastWaiter(t *testing.T) {
	ctx := testCtx(t)
	a, b := pair(t, true)
	e := newEvent(t, a.Events)
	short, cancel := context.WithTimeout(ctx, 20*time.Millisecond)
	err := b.Events.Wait(short, e.Handle())
	cancel()
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("a wait on a pending event with a short deadline: %v", err)
	}
	subs := b.Events.Subscriptions()
	w := waitAsync(ctx, b.Events, e.Handle())
	eventually(t, "a new subscription", func() bool { return b.Events.Subscriptions() == subs+1 })
	e.Trigger()
	if err := recv(t, w, "the second wait"); err != nil {
		t.Fatal(err)
	}
}

// Merge honours its ctx: when it ends before a remote input completes, the
// merged event is poisoned with ctx's error and nothing is left waiting.
func TestMergeHonoursItsContext(t *testing.T) {
	ctx := testCtx(t)
	a, b := pair(t, false)
	remote := newEvent(t, b.Events)
	mctx, cancel := context.WithCancel(ctx)
	merged, err := a.Events.Merge(mctx, remote.Handle())
	if err != nil {
		t.Fatal(err)
	}
	cancel()
	err = a.Events.Wait(ctx, merged)
	var pe *events.PoisonedError
	if !errors.As(err, &pe) || !strings.Contains(pe.Reason, context.Canceled.Error()) {
		t.Fatalf("merged event after its ctx ended: %v, want poisoned by %v", err, context.Canceled)
	}
	remote.Trigger()
}

// An owner that takes the connection and never answers holds the
// subscription's handshake, not the node: when the last waiter leaves,
// the subscribing ends with it, and the handshake call it made is no
// longer pending. It used to run on a context of its own, so its call and
// goroutine stayed for as long as the silent connection did.
func TestASilentOwnerHoldsNothingOnceItsWaitersLeave(t *testing.T) {
	ctx := testCtx(t)
	silent, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer silent.Close()
	accepted := make(chan net.Conn, 4)
	go func() {
		for {
			c, err := silent.Accept()
			if err != nil {
				return
			}
			accepted <- c // read nothing, answer nothing
		}
	}()
	defer func() {
		for len(accepted) > 0 {
			(<-accepted).Close()
		}
	}()
	a := startNode(t, false)
	b := startNode(t, true)
	e := newEvent(t, a.Events)
	// b knows a's instance at the silent address: the handshake is sent
	// and never answered.
	if err := b.RegisterPeer(ext.PeerInfo{InstanceID: a.InstanceID(), Address: ext.WorkerAddress{tcp.Key: []byte(silent.Addr().String())}}); err != nil {
		t.Fatal(err)
	}
	short, cancel := context.WithTimeout(ctx, 50*time.Millisecond)
	err = b.Events.Wait(short, e.Handle())
	cancel()
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("a wait on a silent owner: %v, want its deadline", err)
	}
	eventually(t, "the handshake call to end with the last waiter", func() bool {
		return b.gauge(t, "velo_messenger_pending_responses") == 0
	})
}
