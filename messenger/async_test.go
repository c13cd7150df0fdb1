package messenger_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/velo-go/velo"
	"github.com/velo-go/velo/ext"
	"github.com/velo-go/velo/messenger"
	"github.com/velo-go/velo/transport/tcp"
)

// result is what one UnaryAsync callback received.
type result struct {
	resp []byte
	err  error
}

// callAsync starts one asynchronous call and returns the channel its
// callback reports on. The callback must run exactly once: a second run
// fails the test.
func callAsync(t *testing.T, ctx context.Context, a *velo.Node, target ext.InstanceID, handler string, payload []byte) <-chan result {
	t.Helper()
	ch := make(chan result, 1)
	var runs atomic.Int32
	err := a.UnaryAsync(ctx, target, handler, payload, func(resp []byte, err error) {
		if runs.Add(1) > 1 {
			t.Errorf("callback of %q ran twice (second: %q, %v)", handler, resp, err)
			return
		}
		ch <- result{resp, err}
	})
	must(t, err)
	return ch
}

// heldHandler registers a unary handler on n that reports each start on
// the returned channel and answers with answer once the gate opens.
func heldHandler(t *testing.T, n *velo.Node, name, answer string) (hold *gate, started <-chan struct{}) {
	t.Helper()
	hold, in := newGate(t), make(chan struct{}, 4)
	must(t, n.Register(velo.UnaryHandler(name, func(c *velo.Context) ([]byte, error) {
		in <- struct{}{}
		hold.wait()
		return []byte(answer), nil
	})))
	return hold, in
}

func TestUnaryAsyncAnswersAndErrors(t *testing.T) {
	a, b := pair(t, nil, nil)
	ctx := testCtx(t)
	must(t, b.Register(velo.UnaryHandler("upper", func(c *velo.Context) ([]byte, error) {
		out := make([]byte, len(c.Payload))
		for i, ch := range c.Payload {
			out[i] = ch &^ 0x20
		}
		return out, nil
	})))
	must(t, b.Register(velo.UnaryHandler("fail", func(c *velo.Context) ([]byte, error) {
		return nil, errors.New("no such thing")
	})))

	// The first call to a peer goes through the handshake on a goroutine
	// of its own; the later ones are sent at once.
	for i := range 3 {
		r := recv(t, callAsync(t, ctx, a, b.InstanceID(), "upper", []byte("abc")), "the answer")
		if r.err != nil || string(r.resp) != "ABC" {
			t.Fatalf("call %d: got %q, %v", i, r.resp, r.err)
		}
	}
	r := recv(t, callAsync(t, ctx, a, b.InstanceID(), "fail", nil), "the error")
	if re := remoteErr(t, r.err); re.Handler != "fail" || re.Message != "no such thing" {
		t.Fatalf("remote error: %+v", re)
	}
	r = recv(t, callAsync(t, ctx, a, b.InstanceID(), "nobody", nil), "the unknown handler's error")
	remoteErr(t, r.err)

	// Refused before anything is sent: the callback never runs.
	never := func([]byte, error) { t.Error("callback ran for a call that returned an error") }
	if err := a.UnaryAsync(ctx, b.InstanceID(), "", nil, never); err == nil {
		t.Fatal("an empty handler name was accepted")
	}
	if err := a.UnaryAsync(ctx, ext.NewInstanceID(), "upper", nil, never); !errors.Is(err, velo.ErrPeerNotRegistered) {
		t.Fatalf("unknown peer: %v", err)
	}
	if err := a.UnaryAsync(ctx, b.InstanceID(), "upper", nil, nil); err == nil {
		t.Fatal("a nil callback was accepted")
	}
}

// TestUnaryAsyncDeadlineAndCancel: the context's end completes the call
// with the messenger's errors and gives the slot back at once; the late
// reply is discarded.
func TestUnaryAsyncDeadlineAndCancel(t *testing.T) {
	am := newMetrics(t)
	a, b := pair(t, []velo.Option{velo.WithResponseSlots(1), velo.WithMetrics(am)}, nil)
	ctx := testCtx(t)
	hold, in := heldHandler(t, b, "slow", "late")
	must(t, b.Register(velo.UnaryHandler("fast", func(c *velo.Context) ([]byte, error) {
		return []byte("fast"), nil
	})))
	_, err := a.Unary(ctx, b.InstanceID(), "fast", nil) // the handshake takes the one slot first
	must(t, err)

	short, cancel := context.WithTimeout(ctx, 50*time.Millisecond)
	defer cancel()
	r := recv(t, callAsync(t, short, a, b.InstanceID(), "slow", nil), "the deadline")
	if !errors.Is(r.err, velo.ErrRequestTimeout) || !errors.Is(r.err, context.DeadlineExceeded) {
		t.Fatalf("want ErrRequestTimeout, got %v", r.err)
	}
	recv(t, in, "the slow handler to start")

	// One slot, so this works only if the deadline gave it back.
	cctx, cancelNow := context.WithCancel(ctx)
	ch := callAsync(t, cctx, a, b.InstanceID(), "slow", nil)
	recv(t, in, "the second slow call to start")
	cancelNow()
	if r := recv(t, ch, "the cancel"); !errors.Is(r.err, context.Canceled) {
		t.Fatalf("want context.Canceled, got %v", r.err)
	}
	if r := recv(t, callAsync(t, ctx, a, b.InstanceID(), "fast", nil), "fast"); string(r.resp) != "fast" {
		t.Fatalf("got %q, %v", r.resp, r.err)
	}
	late := am.DispatchFailures.WithLabelValues("response", "late_or_unknown")
	hold.open()
	waitFor(t, "both late replies to be discarded", func() bool { return testutil.ToFloat64(late) == 2 })
	if n := testutil.ToFloat64(am.PendingResponses); n != 0 {
		t.Fatalf("pending responses gauge: %v", n)
	}
}

// TestUnaryAsyncNeverWaitsForASlot: with every slot busy, UnaryAsync fails
// at once instead of blocking (its caller may be a transport reader).
func TestUnaryAsyncNeverWaitsForASlot(t *testing.T) {
	a, b := pair(t, []velo.Option{velo.WithResponseSlots(1)}, nil)
	ctx := testCtx(t)
	hold, in := heldHandler(t, b, "slow", "done")
	must(t, a.WaitForHandler(ctx, b.InstanceID(), "slow"))
	ch := callAsync(t, ctx, a, b.InstanceID(), "slow", nil)
	recv(t, in, "the handler to start")
	err := a.UnaryAsync(ctx, b.InstanceID(), "slow", nil, func([]byte, error) { t.Error("callback ran") })
	if !errors.Is(err, velo.ErrNoResponseSlot) {
		t.Fatalf("want ErrNoResponseSlot, got %v", err)
	}
	hold.open()
	if r := recv(t, ch, "the held call"); string(r.resp) != "done" {
		t.Fatalf("got %q, %v", r.resp, r.err)
	}
}

// TestUnaryAsyncFailsAtShutdown: a call without a deadline ends with
// ErrShuttingDown when its own node shuts down.
func TestUnaryAsyncFailsAtShutdown(t *testing.T) {
	a, b := pair(t, nil, nil)
	hold, in := heldHandler(t, b, "ask", "")
	must(t, a.WaitForHandler(testCtx(t), b.InstanceID(), "ask"))
	ch := callAsync(t, context.Background(), a, b.InstanceID(), "ask", nil)
	recv(t, in, "the handler to start")
	must(t, a.Shutdown(context.Background()))
	if r := recv(t, ch, "the call to fail"); !errors.Is(r.err, velo.ErrShuttingDown) {
		t.Fatalf("want ErrShuttingDown, got %v", r.err)
	}
	err := a.UnaryAsync(context.Background(), b.InstanceID(), "ask", nil, func([]byte, error) { t.Error("callback ran") })
	if !errors.Is(err, velo.ErrShuttingDown) {
		t.Fatalf("call after shutdown: %v", err)
	}
	hold.open()
}

// TestUnaryAsyncRacesEndOnce: replies racing their deadlines. Every call
// completes exactly once, either way, and every slot comes back.
func TestUnaryAsyncRacesEndOnce(t *testing.T) {
	const calls = 2000
	a, b := pair(t, []velo.Option{velo.WithResponseSlots(calls)}, nil)
	ctx := testCtx(t)
	must(t, b.Register(velo.UnaryHandler("echo", func(c *velo.Context) ([]byte, error) {
		return c.Payload, nil
	}, velo.WithInline())))
	must(t, a.WaitForHandler(ctx, b.InstanceID(), "echo"))
	var runs atomic.Int64
	all := make(chan struct{})
	for i := range calls {
		// Deadlines from 0 to ~1 ms, about one round trip: both outcomes happen.
		cctx, cancel := context.WithTimeout(ctx, time.Duration(i%20)*50*time.Microsecond)
		defer cancel()
		err := a.UnaryAsync(cctx, b.InstanceID(), "echo", []byte(fmt.Sprint(i)), func(resp []byte, err error) {
			if err == nil && string(resp) != fmt.Sprint(i) {
				t.Errorf("call %d got %q", i, resp)
			}
			if err != nil && !errors.Is(err, velo.ErrRequestTimeout) {
				t.Errorf("call %d: %v", i, err)
			}
			if runs.Add(1) == calls {
				close(all)
			}
		})
		must(t, err)
	}
	recv(t, all, "every callback")
	// Every slot came back: a full set of calls fits again.
	for range calls {
		if err := a.UnaryAsync(ctx, b.InstanceID(), "echo", nil, func([]byte, error) {}); err != nil {
			t.Fatalf("slots did not all come back: %v", err)
		}
	}
	if n := runs.Load(); n != calls {
		t.Fatalf("%d callbacks for %d calls", n, calls)
	}
}

func TestTypedUnaryAsync(t *testing.T) {
	a, b := pair(t, nil, nil)
	ctx := testCtx(t)
	must(t, b.Register(velo.TypedUnaryHandler("add", func(c *velo.Context, in addReq) (addResp, error) {
		if in.A < 0 {
			return addResp{}, fmt.Errorf("negative operand %d", in.A)
		}
		return addResp{Sum: in.A + in.B}, nil
	})))
	type typed struct {
		out addResp
		err error
	}
	call := func(in addReq) typed {
		ch := make(chan typed, 1)
		must(t, velo.TypedUnaryAsync(ctx, a, b.InstanceID(), "add", in, func(out addResp, err error) { ch <- typed{out, err} }))
		return recv(t, ch, "the typed answer")
	}
	if r := call(addReq{A: 2, B: 3}); r.err != nil || r.out.Sum != 5 {
		t.Fatalf("got %+v", r)
	}
	if r := call(addReq{A: -1}); !strings.Contains(remoteErr(t, r.err).Message, "negative operand -1") {
		t.Fatalf("got %+v", r)
	}
	// An answer that does not decode is the callback's error.
	ch := make(chan error, 1)
	must(t, velo.TypedUnaryAsync(ctx, a, b.InstanceID(), "add", addReq{A: 1}, func(_ []string, err error) { ch <- err }))
	if err := recv(t, ch, "the decode error"); err == nil || !strings.Contains(err.Error(), "decode answer") {
		t.Fatalf("want a decode error, got %v", err)
	}
	// An unencodable request is refused before anything is sent.
	if err := velo.TypedUnaryAsync(ctx, a, b.InstanceID(), "add", make(chan int), func(addResp, error) { t.Error("callback ran") }); err == nil {
		t.Fatal("an unencodable request was accepted")
	}
}

// TestCallsRacingShutdownAllEnd: calls without deadlines keep starting
// while their node shuts down. Each one either is refused or ends: none
// is left waiting for a reply that can no longer come.
func TestCallsRacingShutdownAllEnd(t *testing.T) {
	a, b := pair(t, nil, nil)
	hold := newGate(t)
	must(t, b.Register(velo.UnaryHandler("never", func(c *velo.Context) ([]byte, error) {
		hold.wait()
		return nil, nil
	})))
	must(t, a.WaitForHandler(testCtx(t), b.InstanceID(), "never"))
	const workers = 8
	var started, ended atomic.Int64
	stop := make(chan struct{})
	var wg sync.WaitGroup
	// repeat runs call until stop closes.
	repeat := func(call func()) {
		defer wg.Done()
		for {
			select {
			case <-stop:
				return
			default:
				call()
			}
		}
	}
	for range workers {
		wg.Add(2)
		go repeat(func() {
			if a.UnaryAsync(context.Background(), b.InstanceID(), "never", nil, func([]byte, error) { ended.Add(1) }) == nil {
				started.Add(1)
			}
		})
		go repeat(func() { a.Unary(context.Background(), b.InstanceID(), "never", nil) })
	}
	waitFor(t, "calls to be in flight", func() bool { return started.Load() > 100 })
	must(t, shutdownWithin(a, 0))
	close(stop)
	finished := make(chan struct{})
	go func() { wg.Wait(); close(finished) }()
	recv(t, finished, "every synchronous call to end")
	waitFor(t, "every asynchronous callback", func() bool { return ended.Load() == started.Load() })
	hold.open()
}

// TestUnaryAsyncCallerMayReuseItsBuffer: once UnaryAsync returns, the
// request no longer reads the caller's buffer, even when the frame still
// waits in the admission gate (a tiny send channel here), when the first
// call to a peer is sent from the handshake goroutine, or at the size where
// the transport stops copying frames.
func TestUnaryAsyncCallerMayReuseItsBuffer(t *testing.T) {
	tr, err := tcp.New(tcp.WithChannelBytes(4096))
	must(t, err)
	a, err := velo.New(context.Background(), velo.WithTransport(tr))
	must(t, err)
	t.Cleanup(func() { shutdownWithin(a, 5*time.Second) })
	b := newNode(t)
	must(t, a.RegisterPeer(b.PeerInfo()))
	ctx := testCtx(t)
	var bad atomic.Int64
	must(t, b.Register(velo.UnaryHandler("check", func(c *velo.Context) ([]byte, error) {
		for _, x := range c.Payload[1:] {
			if x != c.Payload[0] {
				bad.Add(1)
				break
			}
		}
		return nil, nil
	})))
	for _, size := range []int{1 << 10, 64 << 10} {
		const calls = 600
		var ended atomic.Int64
		all := make(chan struct{})
		buf := make([]byte, size)
		for i := range calls {
			for k := range buf {
				buf[k] = byte(i)
			}
			err := a.UnaryAsync(ctx, b.InstanceID(), "check", buf, func(_ []byte, err error) {
				if err != nil {
					t.Errorf("call: %v", err)
				}
				if ended.Add(1) == calls {
					close(all)
				}
			})
			must(t, err)
			buf[0] ^= 0xff // reuse the buffer at once
		}
		recv(t, all, "every callback")
		if n := bad.Load(); n != 0 {
			t.Fatalf("%d B payloads: %d requests arrived torn by the caller's reuse of its buffer", size, n)
		}
	}
}

// TestCallbackMayCallShutdown: a callback failed by its node's shutdown may
// call Shutdown itself (it waits for the shutdown in progress) without a
// deadlock: callbacks do not run on the shutdown's own goroutine.
func TestCallbackMayCallShutdown(t *testing.T) {
	a, b := pair(t, nil, nil)
	hold, in := heldHandler(t, b, "ask", "")
	must(t, a.WaitForHandler(testCtx(t), b.InstanceID(), "ask"))
	again := make(chan error, 1)
	must(t, a.UnaryAsync(context.Background(), b.InstanceID(), "ask", nil, func(_ []byte, err error) {
		if !errors.Is(err, velo.ErrShuttingDown) {
			t.Errorf("want ErrShuttingDown, got %v", err)
		}
		again <- a.Shutdown(context.Background())
	}))
	recv(t, in, "the handler to start")
	shut := make(chan error, 1)
	go func() { shut <- shutdownWithin(a, 0) }()
	recv(t, shut, "the shutdown")
	recv(t, again, "the callback's own Shutdown call")
	hold.open()
}

// TestUnaryAsyncAbandon: a named call can be given up without a context.
// Its callback runs once, with the caller's error; its slot is free at
// once; the answer that comes later is discarded.
func TestUnaryAsyncAbandon(t *testing.T) {
	am := newMetrics(t)
	a, b := pair(t, []velo.Option{velo.WithResponseSlots(2), velo.WithMetrics(am)}, nil)
	ctx := testCtx(t)
	hold, in := heldHandler(t, b, "slow", "late")
	must(t, a.WaitForHandler(ctx, b.InstanceID(), "slow")) // the handshake: the call below is named

	ch := make(chan result, 2)
	call, err := a.Messenger().UnaryAsyncCall(ctx, b.InstanceID(), "slow", nil, func(resp []byte, err error) {
		ch <- result{resp, err}
	})
	must(t, err)
	recv(t, in, "the handler to start")
	giveUp := errors.New("test: given up")
	if !call.Abandon(giveUp) {
		t.Fatal("Abandon of a call in flight reported false")
	}
	if r := recv(t, ch, "the callback"); !errors.Is(r.err, giveUp) || r.resp != nil {
		t.Fatalf("callback got %q, %v; want the caller's error", r.resp, r.err)
	}
	if call.Abandon(giveUp) {
		t.Fatal("a second Abandon reported true")
	}
	if n := testutil.ToFloat64(am.PendingResponses); n != 0 {
		t.Fatalf("pending responses gauge after Abandon: %v", n)
	}
	late := am.DispatchFailures.WithLabelValues("response", "late_or_unknown")
	hold.open()
	waitFor(t, "the late reply to be discarded", func() bool { return testutil.ToFloat64(late) == 1 })
	select {
	case r := <-ch:
		t.Fatalf("the callback ran again: %q, %v", r.resp, r.err)
	default:
	}
	if (messenger.AsyncCall{}).Abandon(giveUp) {
		t.Fatal("the zero AsyncCall abandoned something")
	}
}
