package messenger_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/velo-go/velo"
	"github.com/velo-go/velo/ext"
	"github.com/velo-go/velo/internal/frame"
	"github.com/velo-go/velo/messenger"
)

// ended is what a handler saw when its context ended.
type ended struct {
	at    time.Time
	cause error
}

// waiter is a handler that takes its context, says so on started (with
// its Context), and reports on out when the context ends. It returns what
// the context's end was, as an error, or nil when the test releases it.
type waiter struct {
	started chan *velo.Context
	out     chan ended
}

func newWaiter() *waiter {
	return &waiter{started: make(chan *velo.Context, 16), out: make(chan ended, 16)}
}

func (w *waiter) wait(c *velo.Context) error {
	ctx := c.Context()
	w.started <- c
	<-ctx.Done()
	w.out <- ended{at: time.Now(), cause: context.Cause(ctx)}
	return context.Cause(ctx)
}

func (w *waiter) unary(c *velo.Context) ([]byte, error) { return nil, w.wait(c) }

// median of durations.
func median(ds []time.Duration) time.Duration {
	s := slices.Clone(ds)
	slices.Sort(s)
	return s[len(s)/2]
}

// TestHandlerContextEndsWhenCallerCancels: across two nodes, a handler
// that waits on its context sees it end soon after its caller cancels,
// for each call pattern that waits and for spawn and ordered dispatch,
// with ErrCallerCancelled as the cause. Before handlers had contexts, the
// handler ran on for as long as it liked: nothing told it.
//
// The bound is 10 ms for the median of five cancels (a cancel crosses
// loopback in well under a millisecond) and 100 ms for each, so a loaded
// machine does not fail the test while a cancel that is never sent does.
func TestHandlerContextEndsWhenCallerCancels(t *testing.T) {
	a, b := pair(t, nil, nil)
	modes := map[string][]velo.HandlerOption{"spawn": nil, "ordered": {velo.WithOrdered()}}
	calls := map[string]func(ctx context.Context, name string) error{
		"unary": func(ctx context.Context, name string) error {
			_, err := a.Unary(ctx, b.InstanceID(), name, nil)
			return err
		},
		"sync": func(ctx context.Context, name string) error { return a.Sync(ctx, b.InstanceID(), name, nil) },
		"async": func(ctx context.Context, name string) error {
			done := make(chan error, 1)
			if err := a.UnaryAsync(ctx, b.InstanceID(), name, nil, func(_ []byte, err error) { done <- err }); err != nil {
				return err
			}
			return <-done
		},
	}
	for mode, opts := range modes {
		for pattern, call := range calls {
			t.Run(pattern+"/"+mode, func(t *testing.T) {
				name := "wait-" + pattern + "-" + mode
				w := newWaiter()
				h := velo.UnaryHandler(name, w.unary, opts...)
				if pattern == "sync" {
					h = velo.SyncHandler(name, w.wait, opts...)
				}
				must(t, b.Register(h))
				must(t, a.WaitForHandler(testCtx(t), b.InstanceID(), name))
				var lat []time.Duration
				for range 5 {
					ctx, cancel := context.WithCancel(context.Background())
					res := make(chan error, 1)
					go func() { res <- call(ctx, name) }()
					recv(t, w.started, "the handler to start")
					t0 := time.Now()
					cancel()
					e := recv(t, w.out, "the handler's context to end")
					if !errors.Is(e.cause, velo.ErrCallerCancelled) {
						t.Fatalf("cause %v, want ErrCallerCancelled", e.cause)
					}
					if err := recv(t, res, "the call to return"); !errors.Is(err, context.Canceled) {
						t.Fatalf("caller got %v, want context.Canceled", err)
					}
					lat = append(lat, e.at.Sub(t0))
				}
				t.Logf("cancel to handler's Done: %v", lat)
				if m := median(lat); m > 10*time.Millisecond {
					t.Errorf("median %v from cancel to the handler's Done, want at most 10ms", m)
				}
				if m := slices.Max(lat); m > 100*time.Millisecond {
					t.Errorf("slowest %v from cancel to the handler's Done, want at most 100ms", m)
				}
				waitFor(t, "the handler contexts to be unregistered", func() bool {
					live, _ := b.Messenger().HandlerContexts()
					return live == 0
				})
			})
		}
	}
}

// TestHandlerSeesTheCallersDeadline: the deadline a handler's context
// carries is the caller's, less the transit: never later, and not more
// than a few milliseconds earlier (the two nodes share a clock here). It
// holds for every pattern, fire-and-forget included, and with the
// caller's own headers beside it, which the handler still reads (without
// the deadline's). A call without a deadline gives the handler none.
func TestHandlerSeesTheCallersDeadline(t *testing.T) {
	a, b := pair(t, nil, nil)
	type seen struct {
		dl      time.Time
		ok      bool
		headers map[string]string
	}
	got := make(chan seen, 1)
	look := func(c *velo.Context) {
		dl, ok := c.Context().Deadline()
		h, err := c.Headers()
		if err != nil {
			t.Error(err)
		}
		got <- seen{dl, ok, h}
	}
	must(t, b.Register(velo.UnaryHandler("dl-unary", func(c *velo.Context) ([]byte, error) { look(c); return nil, nil })))
	must(t, b.Register(velo.SyncHandler("dl-sync", func(c *velo.Context) error { look(c); return nil })))
	must(t, b.Register(velo.FireHandler("dl-fire", look)))
	must(t, b.Register(velo.UnaryHandler("dl-inline", func(c *velo.Context) ([]byte, error) { look(c); return nil, nil }, velo.WithInline())))
	many := map[string]string{}
	for i := range 15 {
		many[fmt.Sprintf("k%02d", i)] = "v"
	}
	for _, c := range []struct {
		name    string
		handler string
		headers map[string]string
		call    func(ctx context.Context, handler string, opts ...velo.CallOption) error
	}{
		{"unary", "dl-unary", nil, func(ctx context.Context, h string, o ...velo.CallOption) error {
			_, err := a.Unary(ctx, b.InstanceID(), h, nil, o...)
			return err
		}},
		{"unary with 15 headers", "dl-unary", many, func(ctx context.Context, h string, o ...velo.CallOption) error {
			_, err := a.Unary(ctx, b.InstanceID(), h, nil, o...)
			return err
		}},
		{"sync", "dl-sync", map[string]string{"x": "y"}, func(ctx context.Context, h string, o ...velo.CallOption) error {
			return a.Sync(ctx, b.InstanceID(), h, nil, o...)
		}},
		{"send", "dl-fire", nil, func(ctx context.Context, h string, o ...velo.CallOption) error {
			return a.Send(ctx, b.InstanceID(), h, nil, o...)
		}},
		{"async inline", "dl-inline", nil, func(ctx context.Context, h string, o ...velo.CallOption) error {
			done := make(chan error, 1)
			if err := a.UnaryAsync(ctx, b.InstanceID(), h, nil, func(_ []byte, err error) { done <- err }, o...); err != nil {
				return err
			}
			return <-done
		}},
	} {
		t.Run(c.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
			defer cancel()
			callerDL, _ := ctx.Deadline()
			// A caller's own value for the deadline header is dropped.
			headers := map[string]string{messenger.DeadlineHeader: "1 1"}
			for k, v := range c.headers {
				headers[k] = v
			}
			must(t, c.call(ctx, c.handler, velo.WithHeaders(headers)))
			s := recv(t, got, "the handler to run")
			if !s.ok {
				t.Fatal("the handler's context has no deadline")
			}
			early := callerDL.Sub(s.dl)
			t.Logf("handler's deadline is %v before the caller's", early)
			if early < 0 {
				t.Errorf("the handler's deadline is %v after the caller's", -early)
			}
			if early > 5*time.Millisecond {
				t.Errorf("the handler's deadline is %v before the caller's, want at most 5ms", early)
			}
			if _, has := s.headers[messenger.DeadlineHeader]; has {
				t.Error("the handler's headers show the deadline header")
			}
			if len(s.headers) != len(c.headers) {
				t.Errorf("the handler read %d headers, want the caller's %d", len(s.headers), len(c.headers))
			}
			for k, v := range c.headers {
				if s.headers[k] != v {
					t.Errorf("header %q = %q, want %q", k, s.headers[k], v)
				}
			}
			// Without a deadline there is none.
			must(t, c.call(context.Background(), c.handler))
			if s := recv(t, got, "the handler to run"); s.ok {
				t.Errorf("a call without a deadline gave the handler one: %v", s.dl)
			}
		})
	}
}

// TestHandlerContextEndsAtTheCallersDeadline: a handler that waits on its
// context is released at the caller's deadline, in spawn, ordered and
// inline dispatch, with context.DeadlineExceeded, and never after the
// caller gave up. (Inline blocks its connection meanwhile; this handler
// breaks WithInline's rule on purpose, to show its context ends.)
func TestHandlerContextEndsAtTheCallersDeadline(t *testing.T) {
	a, b := pair(t, nil, nil)
	for mode, opts := range map[string][]velo.HandlerOption{
		"spawn": nil, "ordered": {velo.WithOrdered()}, "inline": {velo.WithInline()},
	} {
		t.Run(mode, func(t *testing.T) {
			w := newWaiter()
			name := "deadline-" + mode
			must(t, b.Register(velo.UnaryHandler(name, w.unary, opts...)))
			must(t, a.WaitForHandler(testCtx(t), b.InstanceID(), name))
			ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
			defer cancel()
			callerDL, _ := ctx.Deadline()
			_, err := a.Unary(ctx, b.InstanceID(), name, nil)
			gaveUp := time.Now()
			if !errors.Is(err, velo.ErrRequestTimeout) {
				t.Fatalf("caller got %v, want ErrRequestTimeout", err)
			}
			e := recv(t, w.out, "the handler's context to end")
			if e.cause != context.DeadlineExceeded {
				t.Fatalf("cause %v, want context.DeadlineExceeded", e.cause)
			}
			// Both ends wait on timers in this one process, so a loaded
			// machine delays both alike: the handler's end is measured
			// from the caller giving up, not from the wall-clock deadline.
			t.Logf("the handler's context ended %v after the caller's deadline, %v after the caller gave up",
				e.at.Sub(callerDL), e.at.Sub(gaveUp))
			if after := e.at.Sub(gaveUp); after > 50*time.Millisecond {
				t.Errorf("the handler's context ended %v after its caller gave up", after)
			}
			if late := e.at.Sub(callerDL); late > 2*time.Second {
				t.Errorf("the handler's context ended %v after the caller's deadline", late)
			}
			<-w.started
		})
	}
}

// TestForgedCancelDoesNothing: a cancel is honoured only from the caller
// of the request, on the connection the request came on. A third node
// that names the call, the caller naming a call it never made, and a raw
// connection that proved it speaks for the caller all leave the handler
// running; the caller's own cancel then ends it.
func TestForgedCancelDoesNothing(t *testing.T) {
	sm := newMetrics(t)
	a, b := pair(t, nil, []velo.Option{velo.WithMetrics(sm)})
	third := newNode(t)
	must(t, third.RegisterPeer(b.PeerInfo()))
	w := newWaiter()
	must(t, b.Register(velo.UnaryHandler("hang", w.unary)))
	must(t, b.Register(velo.SyncHandler("probe", func(*velo.Context) error { return nil })))

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	res := make(chan error, 1)
	go func() {
		_, err := a.Unary(ctx, b.InstanceID(), "hang", nil)
		res <- err
	}()
	id := messenger.ResponseIDOf(recv(t, w.started, "the handler to start"))
	body := func(id messenger.ResponseID) []byte { return id.AppendLE(nil) }
	stillRunning := func(what string) {
		t.Helper()
		select {
		case e := <-w.out:
			t.Fatalf("%s ended the handler's context (%v)", what, e.cause)
		default:
		}
	}

	// A third node names the call. Its probe comes after the cancel on the
	// same connection, and a cancel runs on the reader: once the probe is
	// answered, the cancel was handled.
	must(t, third.Messenger().Post(b.InstanceID(), "_velo_cancel", body(id)))
	must(t, third.Sync(testCtx(t), b.InstanceID(), "probe", nil))
	stillRunning("a third node's cancel")
	if n := testutil.ToFloat64(sm.DispatchFailures.WithLabelValues("cancel", "foreign_id")); n != 1 {
		t.Errorf("foreign cancels counted: %v, want 1", n)
	}

	// The caller names a call it did not make.
	wrong := id
	wrong.Hi ^= 1 << 40
	must(t, a.Messenger().Post(b.InstanceID(), "_velo_cancel", body(wrong)))
	must(t, a.Sync(testCtx(t), b.InstanceID(), "probe", nil))
	stillRunning("a cancel of an unknown call")

	// A raw connection that proved it speaks for the caller names the
	// call. A reply to a request after it reaches the caller (unmatched):
	// then the cancel before it was handled.
	conn := rawConn(t, b)
	proveAs(t, conn, a)
	before := a.Messenger().UnmatchedReplies()
	cancelFrame := frame.Append(nil, ext.Frame{Type: ext.Message, Header: wireRequestHeader(0, uint64(a.WorkerID()), 0, "_velo_cancel", nil), Payload: body(id)})
	marker := frame.Append(nil, ext.Frame{Type: ext.Message, Header: wireRequestHeader(byte(messenger.UnaryResponse), uint64(a.WorkerID()), 77<<16|1, "_list_handlers", nil)})
	_, err := conn.Write(append(cancelFrame, marker...))
	must(t, err)
	waitFor(t, "the marker's reply", func() bool { return a.Messenger().UnmatchedReplies() > before })
	stillRunning("a cancel on another connection")

	cancel()
	if e := recv(t, w.out, "the handler's context to end"); !errors.Is(e.cause, velo.ErrCallerCancelled) {
		t.Fatalf("cause %v, want ErrCallerCancelled", e.cause)
	}
	recv(t, res, "the call to return")
}

// TestCancelBeforeTheHandlerAsks: a request that waits on an ordered lane
// behind another is cancelled before it runs; when it runs, its context is
// done already. So is the context of one whose caller's connection ended
// while it waited.
func TestCancelBeforeTheHandlerAsks(t *testing.T) {
	sm := newMetrics(t)
	a, b := pair(t, nil, []velo.Option{velo.WithMetrics(sm)})
	hold := newGate(t)
	first := make(chan struct{}, 1)
	causes := make(chan error, 2)
	must(t, b.Register(velo.UnaryHandler("lane", func(c *velo.Context) ([]byte, error) {
		if string(c.Payload) == "first" {
			first <- struct{}{}
			return nil, hold.wait()
		}
		causes <- context.Cause(c.Context())
		return nil, nil
	}, velo.WithOrdered())))
	must(t, a.WaitForHandler(testCtx(t), b.InstanceID(), "lane"))

	go a.Unary(testCtx(t), b.InstanceID(), "lane", []byte("first"))
	recv(t, first, "the first request to hold the lane")
	ctx, cancel := context.WithCancel(context.Background())
	res := make(chan error, 1)
	go func() {
		_, err := a.Unary(ctx, b.InstanceID(), "lane", []byte("second"))
		res <- err
	}()
	waitFor(t, "the second request to queue", func() bool {
		return testutil.ToFloat64(sm.OrderedLaneDepth.WithLabelValues("lane")) == 1
	})
	cancel()
	recv(t, res, "the cancelled call to return")
	waitFor(t, "the cancel to be kept", func() bool {
		_, tombs := b.Messenger().HandlerContexts()
		return tombs == 1
	})
	hold.open()
	if c := recv(t, causes, "the second request to run"); !errors.Is(c, velo.ErrCallerCancelled) {
		t.Fatalf("cause %v, want ErrCallerCancelled", c)
	}
}

// TestHandlerContextEndsWhenTheCallerLeaves: the caller shuts down while
// its call runs: the handler's context ends with ErrCallerLost as the
// connection goes, before the caller's own shutdown has finished waiting
// for anything.
func TestHandlerContextEndsWhenTheCallerLeaves(t *testing.T) {
	a, b := pair(t, nil, nil)
	w := newWaiter()
	must(t, b.Register(velo.UnaryHandler("hang", w.unary)))
	go a.Unary(context.Background(), b.InstanceID(), "hang", nil)
	recv(t, w.started, "the handler to start")
	must(t, a.Shutdown(testCtx(t)))
	if e := recv(t, w.out, "the handler's context to end"); !errors.Is(e.cause, velo.ErrCallerLost) {
		t.Fatalf("cause %v, want ErrCallerLost", e.cause)
	}
}

// TestShutdownPastItsDrainBudgetEndsHandlerContexts: a shutdown drains
// first, and the handlers' contexts stay live while it does; once its
// context ends, every running handler's context ends (ErrShuttingDown),
// fire-and-forget ones included, so that they can return.
func TestShutdownPastItsDrainBudgetEndsHandlerContexts(t *testing.T) {
	a, b := pair(t, nil, nil)
	w := newWaiter()
	must(t, b.Register(velo.UnaryHandler("hang", w.unary)))
	must(t, b.Register(velo.FireHandler("hang-fire", func(c *velo.Context) { w.wait(c) })))
	go a.Unary(context.Background(), b.InstanceID(), "hang", nil)
	must(t, a.Send(testCtx(t), b.InstanceID(), "hang-fire", nil))
	recv(t, w.started, "the unary handler to start")
	recv(t, w.started, "the fire-and-forget handler to start")

	const budget = 100 * time.Millisecond
	ctx, cancel := context.WithTimeout(context.Background(), budget)
	defer cancel()
	start := time.Now()
	if err := b.Shutdown(ctx); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("shutdown: %v, want the drain cut short", err)
	}
	for range 2 {
		e := recv(t, w.out, "a handler's context to end")
		if !errors.Is(e.cause, velo.ErrShuttingDown) {
			t.Errorf("cause %v, want ErrShuttingDown", e.cause)
		}
		if d := e.at.Sub(start); d < budget {
			t.Errorf("a handler's context ended %v into the drain, before its budget of %v", d, budget)
		}
	}
}

// TestNoCancelToAPeerThatCannotHear: a peer whose address lacks the Go
// mark (as a Rust node's does) is never sent a cancel: here the handler,
// which would see it, runs on after its caller cancelled.
func TestNoCancelToAPeerThatCannotHear(t *testing.T) {
	a := newNode(t)
	b := newNode(t)
	info := b.PeerInfo()
	addr := ext.WorkerAddress{}
	for k, v := range info.Address {
		if k != messenger.ProofKey {
			addr[k] = v
		}
	}
	info.Address = addr
	must(t, a.RegisterPeer(info))
	w := newWaiter()
	must(t, b.Register(velo.UnaryHandler("hang", w.unary)))
	must(t, b.Register(velo.SyncHandler("probe", func(*velo.Context) error { return nil })))
	ctx, cancel := context.WithCancel(context.Background())
	res := make(chan error, 1)
	go func() {
		_, err := a.Unary(ctx, b.InstanceID(), "hang", nil)
		res <- err
	}()
	recv(t, w.started, "the handler to start")
	cancel()
	recv(t, res, "the call to return")
	must(t, a.Sync(testCtx(t), b.InstanceID(), "probe", nil)) // after any cancel, on the same connection
	select {
	case e := <-w.out:
		t.Fatalf("the handler's context ended (%v): a cancel went to a peer without the mark", e.cause)
	default:
	}
	stop, cancelStop := context.WithTimeout(context.Background(), 10*time.Millisecond)
	defer cancelStop()
	b.Shutdown(stop) // past the drain, the handler's context ends
	recv(t, w.out, "the handler's context to end at shutdown")
}

// TestHandlerContextAfterReturn: the context ends when its handler
// returns (context.Canceled), a second call returns the same context, and
// a context first asked for by a goroutine the handler left behind is
// done and leaves nothing registered.
func TestHandlerContextAfterReturn(t *testing.T) {
	a, b := pair(t, nil, nil)
	kept := make(chan context.Context, 1)
	left := make(chan *velo.Context, 1)
	must(t, b.Register(velo.UnaryHandler("keep", func(c *velo.Context) ([]byte, error) {
		ctx := c.Context()
		if c.Context() != ctx {
			t.Error("a second call made another context")
		}
		kept <- ctx
		return nil, nil
	})))
	must(t, b.Register(velo.UnaryHandler("leave", func(c *velo.Context) ([]byte, error) {
		left <- c
		return nil, nil
	})))
	_, err := a.Unary(testCtx(t), b.InstanceID(), "keep", nil)
	must(t, err)
	ctx := recv(t, kept, "the handler")
	<-ctx.Done()
	if c := context.Cause(ctx); c != context.Canceled {
		t.Fatalf("cause %v, want context.Canceled", c)
	}
	_, err = a.Unary(testCtx(t), b.InstanceID(), "leave", nil)
	must(t, err)
	c := recv(t, left, "the handler")
	if late := c.Context(); late.Err() == nil {
		t.Fatal("a context asked for after its handler returned is live")
	}
	if live, _ := b.Messenger().HandlerContexts(); live != 0 {
		t.Fatalf("%d handler contexts left registered", live)
	}
}
