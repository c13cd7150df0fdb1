package messenger_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/velo-go/velo"
	"github.com/velo-go/velo/ext"
	"github.com/velo-go/velo/internal/frame"
	"github.com/velo-go/velo/internal/msgrx/hook"
	"github.com/velo-go/velo/messenger"
	"github.com/velo-go/velo/metrics"
)

// Calls from a node to itself (messenger/loopback.go). Most tests run the
// same assertions twice, on a call to the node itself and on a call from
// another node, so that "the same semantics as a remote call" is what is
// checked, not a description of it.

// bothWays runs fn as a self call (caller == server) and as a remote call
// (caller is another node that registered the server).
func bothWays(t *testing.T, fn func(t *testing.T, caller, server *velo.Node)) {
	t.Run("self", func(t *testing.T) {
		n := newNode(t)
		fn(t, n, n)
	})
	t.Run("remote", func(t *testing.T) {
		caller, server := pair(t, nil, nil)
		fn(t, caller, server)
	})
}

// TestSelfCallEveryPattern: fire-and-forget, sync, unary, typed unary and
// UnaryAsync to the node's own instance id run the local handler, with the
// caller's headers, and the handler knows who called.
func TestSelfCallEveryPattern(t *testing.T) {
	bothWays(t, func(t *testing.T, caller, server *velo.Node) {
		ctx := testCtx(t)
		type seen struct {
			payload, header string
			sender          ext.InstanceID
			tls             bool
		}
		fired := make(chan seen, 1)
		note := func(c *velo.Context) seen {
			h, err := c.Headers()
			must(t, err)
			id, _ := c.SenderInstanceID()
			return seen{payload: string(c.Payload), header: h["k"], sender: id, tls: c.PeerTLS() != nil}
		}
		must(t, server.Register(velo.FireHandler("fire", func(c *velo.Context) { fired <- note(c) })))
		synced := make(chan seen, 1)
		must(t, server.Register(velo.SyncHandler("sync", func(c *velo.Context) error { synced <- note(c); return nil })))
		must(t, server.Register(velo.UnaryHandler("echo", func(c *velo.Context) ([]byte, error) {
			s := note(c)
			return fmt.Appendf(nil, "%s/%s/%v", s.payload, s.header, s.sender == caller.InstanceID()), nil
		})))
		must(t, server.Register(velo.TypedUnaryHandler("double", func(_ *velo.Context, n int) (int, error) { return 2 * n, nil })))
		target := server.InstanceID()
		hdr := velo.WithHeaders(map[string]string{"k": "v"})

		must(t, caller.Send(ctx, target, "fire", []byte("f"), hdr))
		want := seen{payload: "f", header: "v", sender: caller.InstanceID()}
		if got := recv(t, fired, "the fire-and-forget handler"); got != want {
			t.Errorf("fire-and-forget: handler saw %+v, want %+v", got, want)
		}
		must(t, caller.Sync(ctx, target, "sync", []byte("s"), hdr))
		select {
		case got := <-synced:
			if want.payload = "s"; got != want {
				t.Errorf("sync: handler saw %+v, want %+v", got, want)
			}
		default:
			t.Error("sync returned before its handler ran")
		}
		resp, err := caller.Unary(ctx, target, "echo", []byte("u"), hdr)
		if err != nil || string(resp) != "u/v/true" {
			t.Errorf("unary: %q, %v", resp, err)
		}
		if got, err := velo.TypedUnary[int](ctx, caller, target, "double", 21); err != nil || got != 42 {
			t.Errorf("typed unary: %d, %v", got, err)
		}
		type answer struct {
			resp string
			err  error
		}
		async := make(chan answer, 1)
		must(t, caller.UnaryAsync(ctx, target, "echo", []byte("a"), func(b []byte, err error) { async <- answer{string(b), err} }))
		if got := recv(t, async, "the async answer"); got.err != nil || got.resp != "a//true" {
			t.Errorf("unary async: %+v", got)
		}
		if hs, err := caller.RemoteHandlers(ctx, target); err != nil || len(hs) != 4 {
			t.Errorf("remote handlers: %v, %v", hs, err)
		}
	})
}

// TestSelfCallHandlerErrors: a handler's error comes back as over the
// wire: a *RemoteError naming the handler, its code, and errors.Is on the
// sentinel it returned; an unknown handler is ErrUnknownHandler; a panic
// is an Internal error.
func TestSelfCallHandlerErrors(t *testing.T) {
	errQuota := velo.NewSentinel(velo.ResourceExhausted, "test.quota", "out of quota")
	bothWays(t, func(t *testing.T, caller, server *velo.Node) {
		ctx := testCtx(t)
		must(t, server.Register(velo.UnaryHandler("quota", func(*velo.Context) ([]byte, error) {
			return nil, fmt.Errorf("for tenant 7: %w", errQuota)
		})))
		must(t, server.Register(velo.SyncHandler("plain", func(*velo.Context) error { return errors.New("plain failure") })))
		must(t, server.Register(velo.UnaryHandler("panics", func(*velo.Context) ([]byte, error) { panic("boom") })))
		target := server.InstanceID()

		_, err := caller.Unary(ctx, target, "quota", nil)
		var re *velo.RemoteError
		if !errors.As(err, &re) || re.Handler != "quota" || !errors.Is(err, errQuota) || velo.ErrorCode(err) != velo.ResourceExhausted {
			t.Errorf("coded error: %v (remote error %+v)", err, re)
		}
		err = caller.Sync(ctx, target, "plain", nil)
		if !errors.As(err, &re) || re.Message != "plain failure" {
			t.Errorf("sync error: %v", err)
		}
		if _, err := caller.Unary(ctx, target, "nobody", nil); !errors.Is(err, velo.ErrUnknownHandler) {
			t.Errorf("unknown handler: %v", err)
		}
		if _, err := caller.Unary(ctx, target, "panics", nil); velo.ErrorCode(err) != velo.Internal {
			t.Errorf("panic: %v (code %v)", err, velo.ErrorCode(err))
		}
	})
}

// TestSelfCallTimeout: a self call whose handler outlives the caller's
// deadline ends with ErrRequestTimeout, and the handler's context ends at
// that deadline too (the deadline travels with a self call as with a
// remote one).
func TestSelfCallTimeout(t *testing.T) {
	bothWays(t, func(t *testing.T, caller, server *velo.Node) {
		handlerEnd := make(chan error, 1)
		must(t, server.Register(velo.UnaryHandler("slow", func(c *velo.Context) ([]byte, error) {
			hctx := c.Context()
			if _, ok := hctx.Deadline(); !ok {
				handlerEnd <- errors.New("the handler's context has no deadline")
				return nil, nil
			}
			select {
			case <-hctx.Done():
				handlerEnd <- context.Cause(hctx)
			case <-time.After(failAfter):
				handlerEnd <- errors.New("the handler's context never ended")
			}
			return nil, hctx.Err()
		})))
		ctx, cancel := context.WithTimeout(testCtx(t), 50*time.Millisecond)
		defer cancel()
		_, err := caller.Unary(ctx, server.InstanceID(), "slow", nil)
		if !errors.Is(err, velo.ErrRequestTimeout) || !errors.Is(err, context.DeadlineExceeded) {
			t.Errorf("call: %v, want ErrRequestTimeout", err)
		}
		if err := recv(t, handlerEnd, "the handler's end"); !errors.Is(err, context.DeadlineExceeded) {
			t.Errorf("handler's context ended with %v, want its deadline", err)
		}
	})
}

// TestSelfCallCancel: a caller that cancels its self call ends the
// handler's context with ErrCallerCancelled, as a Go peer's cancel does.
func TestSelfCallCancel(t *testing.T) {
	bothWays(t, func(t *testing.T, caller, server *velo.Node) {
		started := make(chan struct{})
		handlerEnd := make(chan error, 1)
		must(t, server.Register(velo.UnaryHandler("wait", func(c *velo.Context) ([]byte, error) {
			hctx := c.Context()
			close(started)
			select {
			case <-hctx.Done():
				handlerEnd <- context.Cause(hctx)
			case <-time.After(failAfter):
				handlerEnd <- errors.New("the handler's context never ended")
			}
			return nil, nil
		})))
		ctx, cancel := context.WithCancel(testCtx(t))
		go func() {
			<-started
			cancel()
		}()
		if _, err := caller.Unary(ctx, server.InstanceID(), "wait", nil); !errors.Is(err, context.Canceled) {
			t.Errorf("call: %v, want context.Canceled", err)
		}
		if err := recv(t, handlerEnd, "the handler's end"); !errors.Is(err, velo.ErrCallerCancelled) {
			t.Errorf("handler's context ended with %v, want ErrCallerCancelled", err)
		}
	})
}

// TestSelfCallOrdered: fire-and-forget self calls to an ordered handler
// run one at a time, in the order they were sent; WithMaxConcurrent bounds
// concurrent self calls as it bounds a peer's.
func TestSelfCallOrdered(t *testing.T) {
	bothWays(t, func(t *testing.T, caller, server *velo.Node) {
		ctx := testCtx(t)
		const n = 200
		got := make(chan int, n)
		must(t, server.Register(velo.FireHandler("seq", func(c *velo.Context) {
			var i int
			fmt.Sscan(string(c.Payload), &i)
			got <- i
		}, velo.WithOrdered())))
		for i := range n {
			must(t, caller.Send(ctx, server.InstanceID(), "seq", fmt.Append(nil, i)))
		}
		for i := range n {
			if v := recv(t, got, "an ordered message"); v != i {
				t.Fatalf("message %d arrived as the %dth", v, i)
			}
		}

		var running, most atomic.Int32
		must(t, server.Register(velo.SyncHandler("one", func(*velo.Context) error {
			r := running.Add(1)
			for m := most.Load(); r > m && !most.CompareAndSwap(m, r); m = most.Load() {
			}
			time.Sleep(time.Millisecond) // holds the place: overlap would show
			running.Add(-1)
			return nil
		}, velo.WithMaxConcurrent(1))))
		var wg sync.WaitGroup
		for range 8 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				if err := caller.Sync(ctx, server.InstanceID(), "one", nil); err != nil {
					t.Error(err)
				}
			}()
		}
		wg.Wait()
		if m := most.Load(); m != 1 {
			t.Errorf("%d handlers of a WithMaxConcurrent(1) handler ran at once", m)
		}
	})
}

// TestSelfCallInline: an inline handler answers a self call (it runs on
// the caller's goroutine), and an asynchronous call's callback still never
// runs inside UnaryAsync, even though the answer came before the send
// returned.
func TestSelfCallInline(t *testing.T) {
	n := newNode(t)
	ctx := testCtx(t)
	must(t, n.Register(velo.UnaryHandler("quick", func(c *velo.Context) ([]byte, error) {
		return append([]byte("q:"), c.Payload...), nil
	}, velo.WithInline())))
	if resp, err := n.Unary(ctx, n.InstanceID(), "quick", []byte("1")); err != nil || string(resp) != "q:1" {
		t.Fatalf("inline unary: %q, %v", resp, err)
	}
	for range 50 {
		// The callback waits for UnaryAsync to return: run inside it, it
		// would wait for ever (failAfter detects that), on a goroutine of
		// its own it goes on at once.
		returned := make(chan struct{})
		type answer struct {
			resp   string
			err    error
			inside bool
		}
		got := make(chan answer, 1)
		must(t, n.UnaryAsync(ctx, n.InstanceID(), "quick", []byte("2"), func(b []byte, err error) {
			inside := false
			select {
			case <-returned:
			case <-time.After(failAfter):
				inside = true
			}
			got <- answer{string(b), err, inside}
		}))
		close(returned)
		a := recv(t, got, "the async answer")
		if a.err != nil || a.resp != "q:2" {
			t.Fatalf("inline unary async: %+v", a)
		}
		if a.inside {
			t.Fatal("the callback ran inside UnaryAsync")
		}
	}
	// A refusal comes back inside the send as well (no such handler).
	errs := make(chan error, 1)
	must(t, n.UnaryAsync(ctx, n.InstanceID(), "nobody", nil, func(_ []byte, err error) { errs <- err }))
	if err := recv(t, errs, "the refusal"); !errors.Is(err, velo.ErrUnknownHandler) {
		t.Fatalf("async to an unknown handler: %v", err)
	}
}

// TestSelfCallDrain: a draining node refuses its own new calls as it
// refuses a peer's (ErrShuttingDown), still runs its drain-exempt
// handlers, and a fire-and-forget message to itself fails rather than
// vanish.
func TestSelfCallDrain(t *testing.T) {
	bothWays(t, func(t *testing.T, caller, server *velo.Node) {
		ctx := testCtx(t)
		ran := make(chan struct{}, 4)
		must(t, server.Register(velo.UnaryHandler("work", func(*velo.Context) ([]byte, error) { ran <- struct{}{}; return nil, nil })))
		must(t, server.Register(velo.SyncHandler("exempt", func(*velo.Context) error { return nil }, velo.WithDrainExempt())))
		target := server.InstanceID()
		if _, err := caller.Unary(ctx, target, "work", nil); err != nil { // greets, for the remote case
			t.Fatal(err)
		}
		<-ran
		server.BeginDrain()
		if _, err := caller.Unary(ctx, target, "work", nil); !errors.Is(err, velo.ErrShuttingDown) {
			t.Errorf("unary while draining: %v, want ErrShuttingDown", err)
		}
		if err := caller.Sync(ctx, target, "work", nil); !errors.Is(err, velo.ErrShuttingDown) {
			t.Errorf("sync while draining: %v, want ErrShuttingDown", err)
		}
		errs := make(chan error, 1)
		must(t, caller.UnaryAsync(ctx, target, "work", nil, func(_ []byte, err error) { errs <- err }))
		if err := recv(t, errs, "the async refusal"); !errors.Is(err, velo.ErrShuttingDown) {
			t.Errorf("unary async while draining: %v, want ErrShuttingDown", err)
		}
		if err := caller.Sync(ctx, target, "exempt", nil); err != nil {
			t.Errorf("a drain-exempt handler while draining: %v", err)
		}
		if caller == server {
			if err := caller.Send(ctx, target, "work", nil); !errors.Is(err, velo.ErrShuttingDown) {
				t.Errorf("fire-and-forget to itself while draining: %v, want ErrShuttingDown", err)
			}
		}
		select {
		case <-ran:
			t.Error("a refused request ran its handler")
		default:
		}
	})
}

// TestSelfCallsInFlightAtShutdown: self calls admitted before Shutdown
// hold the drain open and are answered; those whose handlers are still
// running when the drain budget is gone fail with ErrShuttingDown, as a
// peer's calls to a node that shuts down do. None is lost: every call
// returns, sync or async, one way or the other.
func TestSelfCallsInFlightAtShutdown(t *testing.T) {
	for _, budget := range []time.Duration{failAfter, 0} {
		t.Run(fmt.Sprint("budget=", budget), func(t *testing.T) {
			bothWays(t, func(t *testing.T, caller, server *velo.Node) {
				inFlightAtShutdown(t, caller, server, budget)
			})
		})
	}
}

func inFlightAtShutdown(t *testing.T, caller, server *velo.Node, budget time.Duration) {
	const calls = 16
	release := newGate(t)
	var entered sync.WaitGroup
	entered.Add(2 * calls)
	// The handler ignores its context: only release ends it, so without a
	// drain budget it is still running when the node stops.
	must(t, server.Register(velo.UnaryHandler("hold", func(c *velo.Context) ([]byte, error) {
		if len(c.Payload) == 0 {
			entered.Done()
			release.wait()
		}
		return []byte("ok"), nil
	})))
	target := server.InstanceID()
	if _, err := caller.Unary(testCtx(t), target, "hold", []byte("greet")); err != nil {
		t.Fatal(err)
	}
	results := make(chan error, 2*calls)
	for range calls {
		go func() {
			_, err := caller.Unary(context.Background(), target, "hold", nil)
			results <- err
		}()
		must(t, caller.UnaryAsync(context.Background(), target, "hold", nil, func(_ []byte, err error) { results <- err }))
	}
	entered.Wait()
	ctx, cancel := context.WithTimeout(context.Background(), budget)
	defer cancel()
	shut := make(chan error, 1)
	go func() { shut <- server.Shutdown(ctx) }()
	if budget > 0 {
		waitFor(t, "the drain to refuse new calls", func() bool {
			_, err := caller.Unary(context.Background(), target, "hold", []byte("new"))
			return errors.Is(err, velo.ErrShuttingDown)
		})
		release.open()
	}
	ok, refused := 0, 0
	for range 2 * calls {
		switch err := recv(t, results, "a call's end"); {
		case err == nil:
			ok++
		case errors.Is(err, velo.ErrShuttingDown):
			refused++
		default:
			t.Errorf("a call in flight at shutdown ended with %v", err)
		}
	}
	release.open() // the handlers that outlived the node return now
	if err := recv(t, shut, "the shutdown"); budget > 0 && err != nil {
		t.Errorf("shutdown: %v", err)
	}
	if budget > 0 && ok != 2*calls {
		t.Errorf("with a drain budget, %d of %d calls in flight were answered (%d refused)", ok, 2*calls, refused)
	}
	if budget == 0 && refused != 2*calls {
		t.Errorf("without a drain budget, %d of %d calls in flight failed with ErrShuttingDown (%d answered)", refused, 2*calls, ok)
	}
}

// selfUnaryAllocs bounds the allocations of one unary self call of a
// 64-byte payload to a spawn-mode handler that echoes it: the copy of the
// answer the caller keeps (onFrame), the reply header, and one Context in
// 64 (contextSlab); the request is built in a pooled buffer, which
// the loopback retains until the handler is done. One of slack, as for
// the remote round trip (unaryRoundTripAllocs).
const selfUnaryAllocs = 3

// TestSelfUnaryAllocs: a unary self call allocates no more than a remote
// round trip, both sides counted, measured here on the same handler.
func TestSelfUnaryAllocs(t *testing.T) {
	if testing.Short() {
		t.Skip("counts allocations over 1000 calls")
	}
	ctx := testCtx(t)
	a, b := pair(t, nil, nil)
	echo := func(c *velo.Context) ([]byte, error) { return c.Payload, nil }
	must(t, b.Register(velo.UnaryHandler("echo64", echo)))
	payload := make([]byte, 64)
	measure := func(caller *velo.Node, target ext.InstanceID) float64 {
		call := func() {
			if _, err := caller.Unary(ctx, target, "echo64", payload); err != nil {
				t.Fatal(err)
			}
		}
		for range 200 {
			call()
		}
		return testing.AllocsPerRun(1000, call)
	}
	self, remote := measure(b, b.InstanceID()), measure(a, b.InstanceID())
	t.Logf("allocations per unary call: to itself %v, round trip to a peer (both sides) %v", self, remote)
	slack := 0.0
	if raceEnabled {
		slack = 1 // sync.Pool drops a share of what is put back (see raceEnabled)
	}
	if self > remote+slack {
		t.Errorf("a self call allocates %v, more than a remote round trip's %v", self, remote)
	}
	if self > selfUnaryAllocs {
		t.Errorf("a self call allocates %v, want at most %d", self, selfUnaryAllocs)
	}
}

// TestForgedSelfRequestsAreDropped: only the loopback speaks for a node.
// A stranger's connection whose requests claim the node's own worker id
// (so that the node would run them as its own, and answer itself) has
// them dropped and counted: the handler never runs, and a challenge in
// the node's name makes it send no proof.
func TestForgedSelfRequestsAreDropped(t *testing.T) {
	sm := newMetrics(t)
	n := newNode(t, velo.WithMetrics(sm))
	ran := make(chan struct{}, 1)
	must(t, n.Register(velo.FireHandler("fire", func(*velo.Context) { ran <- struct{}{} })))
	var proofs atomic.Int32
	n.Messenger().OnChallenge(func([]byte) { proofs.Add(1) })
	conn := rawConn(t, n)
	w := uint64(n.WorkerID())
	var buf []byte
	buf = frame.Append(buf, ext.Frame{Type: ext.Message, Header: wireRequestHeader(0, w, 0, "fire", nil)})
	buf = frame.Append(buf, ext.Frame{Type: ext.Message, Header: wireRequestHeader(0, w, 0, "_velo_prove", nil), Payload: make([]byte, 24)})
	buf = frame.Append(buf, ext.Frame{Type: ext.Message, Header: wireRequestHeader(0, w, 7<<16, "fire", nil)})
	_, err := conn.Write(buf)
	must(t, err)
	forged := sm.DispatchFailures.WithLabelValues("identity", "claims_own_identity")
	waitFor(t, "the three forged requests to be dropped", func() bool { return testutil.ToFloat64(forged) == 3 })
	if got := n.Messenger().IdentityStats().Mismatched; got != 2 {
		t.Errorf("%d forged requests counted as mismatched, want 2", got)
	}
	// The node still runs its own calls.
	must(t, n.Sync(testCtx(t), n.InstanceID(), "fire", nil))
	recv(t, ran, "the node's own call")
	select {
	case <-ran:
		t.Error("a forged request ran its handler")
	default:
	}
	if got := proofs.Load(); got != 0 {
		t.Errorf("a challenge in the node's own name was answered %d times", got)
	}
}

// TestSelfCallMetrics: a self call counts where a peer's request counts
// on the handler's side (dequeued for dispatch, the handler's requests)
// and as a pending response while it waits, and nowhere in the transport
// families: no transport carried it.
func TestSelfCallMetrics(t *testing.T) {
	reg := prometheus.NewRegistry()
	sm, err := metrics.Register(reg)
	must(t, err)
	n := newNode(t, velo.WithMetrics(sm))
	ctx := testCtx(t)
	pending := make(chan float64, 1)
	must(t, n.Register(velo.UnaryHandler("echo", func(c *velo.Context) ([]byte, error) {
		select {
		case pending <- testutil.ToFloat64(sm.PendingResponses):
		default:
		}
		return c.Payload, nil
	})))
	transportFrames := func() float64 {
		fams, err := reg.Gather()
		must(t, err)
		sum := 0.0
		for _, f := range fams {
			if strings.HasPrefix(f.GetName(), "velo_transport_frame") {
				for _, m := range f.GetMetric() {
					sum += m.GetCounter().GetValue()
				}
			}
		}
		return sum
	}
	frames, dequeued := transportFrames(), testutil.ToFloat64(sm.InboundDequeued)
	const calls = 10
	for range calls {
		if _, err := n.Unary(ctx, n.InstanceID(), "echo", []byte("x")); err != nil {
			t.Fatal(err)
		}
	}
	if got := testutil.ToFloat64(sm.HandlerRequests.WithLabelValues("echo", "unary", "success")); got != calls {
		t.Errorf("handler requests: %v, want %d", got, calls)
	}
	if got := testutil.ToFloat64(sm.InboundDequeued) - dequeued; got != calls {
		t.Errorf("inbound dequeued: %v more, want %d", got, calls)
	}
	if got := <-pending; got != 1 {
		t.Errorf("pending responses while the handler ran: %v, want 1", got)
	}
	if got := testutil.ToFloat64(sm.PendingResponses); got != 0 {
		t.Errorf("pending responses after the calls: %v, want 0", got)
	}
	if got := transportFrames(); got != frames {
		t.Errorf("transport frame counters moved by %v for calls no transport carried", got-frames)
	}
}

// TestSelfIsNotAPeerToManage: the node's route to itself survives what
// manages peers: UnregisterPeer and DiscoverAndRegisterPeer with its own
// id leave it alone, and RegisterPeer with its own PeerInfo is refused as
// before.
func TestSelfIsNotAPeerToManage(t *testing.T) {
	n := newNode(t)
	ctx := testCtx(t)
	must(t, n.Register(velo.UnaryHandler("echo", func(c *velo.Context) ([]byte, error) { return c.Payload, nil })))
	if err := n.RegisterPeer(n.PeerInfo()); err == nil {
		t.Error("RegisterPeer with the node's own PeerInfo succeeded")
	}
	n.UnregisterPeer(n.InstanceID())
	if err := n.DiscoverAndRegisterPeer(ctx, n.InstanceID()); err != nil {
		t.Errorf("DiscoverAndRegisterPeer of itself: %v", err)
	}
	if resp, err := n.Unary(ctx, n.InstanceID(), "echo", []byte("x")); err != nil || string(resp) != "x" {
		t.Errorf("a self call after all that: %q, %v", resp, err)
	}
}

// TestSelfViewAnswerHeldIsCopied: an asynchronous view call (which reads
// a large answer where it arrived) to an inline handler of the node itself
// is answered inside its send, so the answer is held and delivered after
// the frame was released: it must be a copy, not a view of memory the
// lender has taken back. The callback waits until the loan is idle,
// scribbles over the lent buffer, and only then reads its answer.
func TestSelfViewAnswerHeldIsCopied(t *testing.T) {
	n := newNode(t)
	want := bytes.Repeat([]byte("view"), 8<<10) // 32 KiB: over the view threshold
	lentBuf := bytes.Clone(want)
	loan := hook.NewLoan()
	must(t, n.Messenger().RegisterSystem(messenger.UnaryHandler("_lend_big", func(c *messenger.Context) ([]byte, error) {
		loan.Retain() // the handler's reference
		c.LendAnswer(loan)
		loan.Release() // the lender's: the answer's readers hold the rest
		return lentBuf, nil
	}, messenger.WithInline())))
	got := make(chan error, 1)
	must(t, n.Messenger().UnaryAsyncView(testCtx(t), n.InstanceID(), "_lend_big", nil, func(resp []byte, err error) {
		if err != nil {
			got <- err
			return
		}
		select {
		case <-loan.Idle():
		case <-time.After(failAfter):
			got <- errors.New("the loan never went idle")
			return
		}
		for i := range lentBuf {
			lentBuf[i] = 'x' // the lender reuses its memory
		}
		if !bytes.Equal(resp, want) {
			got <- errors.New("the answer changed under the callback: it was a view of released memory")
			return
		}
		got <- nil
	}))
	if err := recv(t, got, "the view call's answer"); err != nil {
		t.Fatal(err)
	}
}
