package messenger_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/velo-go/velo"
)

// The tests of this file follow the book's chapter "Shutdown and drain".

// TestInFlightRequestHoldsTheDrain: Shutdown(WaitForever) on the server
// returns only after the blocked handler was released, and its caller gets
// the answer.
func TestInFlightRequestHoldsTheDrain(t *testing.T) {
	a, b := pair(t, nil, nil)
	ctx := testCtx(t)
	hold, in := newGate(t), make(chan struct{}, 1)
	must(t, b.Register(velo.UnaryHandler("work", func(c *velo.Context) ([]byte, error) {
		in <- struct{}{}
		hold.wait()
		return []byte("done"), nil
	})))
	must(t, b.Register(velo.SyncHandler("probe", func(c *velo.Context) error { return nil })))
	answer := make(chan error, 1)
	go func() {
		got, err := a.Unary(ctx, b.InstanceID(), "work", nil)
		if err == nil && string(got) != "done" {
			err = fmt.Errorf("answer %q", got)
		}
		answer <- err
	}()
	recv(t, in, "the handler to start")

	var released atomic.Bool
	shut := make(chan bool, 1)
	go func() {
		err := b.Shutdown(context.Background())
		if err != nil {
			t.Errorf("shutdown: %v", err)
		}
		shut <- released.Load()
	}()
	// The drain flag is up before Shutdown waits: new requests are refused.
	waitFor(t, "the drain to begin", func() bool {
		select {
		case <-shut:
			t.Fatal("Shutdown returned while a request was in flight")
		default:
		}
		err := a.Sync(ctx, b.InstanceID(), "probe", nil)
		return errors.Is(err, velo.ErrShuttingDown)
	})
	select {
	case <-shut:
		t.Fatal("Shutdown returned while a request was in flight")
	default:
	}
	released.Store(true)
	hold.open()
	if !recv(t, shut, "Shutdown") {
		t.Fatal("Shutdown returned before the handler was released")
	}
	must(t, recv(t, answer, "the in-flight call"))
}

// TestDrainRefusesNewRequestsFast: during BeginDrain, a new request fails
// at once with ErrShuttingDown (the echo), a drain-exempt handler still
// answers, and requests accepted before the drain still get their answers.
func TestDrainRefusesNewRequestsFast(t *testing.T) {
	a, b := pair(t, nil, nil)
	ctx := testCtx(t)
	hold, in := newGate(t), make(chan struct{}, 1)
	must(t, b.Register(velo.UnaryHandler("slow", func(c *velo.Context) ([]byte, error) {
		in <- struct{}{}
		hold.wait()
		return []byte("accepted before the drain"), nil
	})))
	must(t, b.Register(velo.UnaryHandler("work", func(c *velo.Context) ([]byte, error) { return []byte("ok"), nil })))
	must(t, b.Register(velo.UnaryHandler("renew", func(c *velo.Context) ([]byte, error) {
		return []byte("exempt ok"), nil
	}, velo.WithDrainExempt())))
	_, err := a.Unary(ctx, b.InstanceID(), "work", nil) // handshake before the drain
	must(t, err)

	answer := make(chan error, 1)
	go func() {
		got, err := a.Unary(ctx, b.InstanceID(), "slow", nil)
		if err == nil && string(got) != "accepted before the drain" {
			err = fmt.Errorf("answer %q", got)
		}
		answer <- err
	}()
	recv(t, in, "the slow handler to start")
	b.BeginDrain()

	const deadline = 5 * time.Second
	for _, call := range []struct {
		name string
		do   func(context.Context) error
	}{
		{"unary", func(ctx context.Context) error { _, err := a.Unary(ctx, b.InstanceID(), "work", nil); return err }},
		{"sync", func(ctx context.Context) error { return a.Sync(ctx, b.InstanceID(), "work", nil) }},
		{"typed", func(ctx context.Context) error {
			_, err := velo.TypedUnary[string](ctx, a, b.InstanceID(), "work", "x")
			return err
		}},
	} {
		cctx, cancel := context.WithTimeout(ctx, deadline)
		start := time.Now()
		err := call.do(cctx)
		cancel()
		if !errors.Is(err, velo.ErrShuttingDown) {
			t.Fatalf("%s during the drain: want ErrShuttingDown, got %v", call.name, err)
		}
		if errors.Is(err, velo.ErrRequestTimeout) {
			t.Fatalf("%s: the refusal came as a timeout: %v", call.name, err)
		}
		if el := time.Since(start); el > deadline/2 {
			t.Fatalf("%s: the refusal took %v; the echo should fail it at once", call.name, el)
		}
	}
	got, err := a.Unary(ctx, b.InstanceID(), "renew", nil)
	must(t, err)
	if string(got) != "exempt ok" {
		t.Fatalf("exempt handler: %q", got)
	}
	hold.open()
	must(t, recv(t, answer, "the call accepted before the drain"))
}

// TestThousandInFlightAreAllAnswered: 1,000 requests admitted before a
// WaitForever shutdown are all answered.
func TestThousandInFlightAreAllAnswered(t *testing.T) {
	const n = 1000
	a, b := pair(t, nil, nil)
	ctx := testCtx(t)
	hold := newGate(t)
	allIn := make(chan struct{})
	var entered atomic.Int64
	must(t, b.Register(velo.UnaryHandler("batch", func(c *velo.Context) ([]byte, error) {
		if entered.Add(1) == n {
			close(allIn)
		}
		hold.wait()
		return append([]byte(nil), c.Payload...), nil
	})))
	must(t, a.WaitForHandler(ctx, b.InstanceID(), "batch"))

	var wg sync.WaitGroup
	var ok, bad atomic.Int64
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			got, err := a.Unary(ctx, b.InstanceID(), "batch", seq(i))
			if err != nil || unseq(got) != i {
				if bad.Add(1) <= 3 {
					t.Errorf("call %d: %v (%x)", i, err, got)
				}
				return
			}
			ok.Add(1)
		}()
	}
	recv(t, allIn, "all requests to reach the handler")
	var released atomic.Bool
	shut := make(chan bool, 1)
	go func() {
		if err := b.Shutdown(context.Background()); err != nil {
			t.Errorf("shutdown: %v", err)
		}
		shut <- released.Load()
	}()
	released.Store(true)
	hold.open()
	wg.Wait()
	if !recv(t, shut, "Shutdown") {
		t.Error("Shutdown returned before the handlers were released")
	}
	if ok.Load() != n {
		t.Fatalf("%d of %d answered", ok.Load(), n)
	}
}

// TestConcurrentShutdownsShareOneRun: a second Shutdown waits for the first
// and returns its result, even with another policy.
func TestConcurrentShutdownsShareOneRun(t *testing.T) {
	a, b := pair(t, nil, nil)
	ctx := testCtx(t)
	hold, in := newGate(t), make(chan struct{}, 1)
	must(t, b.Register(velo.SyncHandler("hold", func(c *velo.Context) error {
		in <- struct{}{}
		return hold.wait()
	})))
	must(t, b.Register(velo.SyncHandler("probe", func(c *velo.Context) error { return nil })))
	go a.Sync(ctx, b.InstanceID(), "hold", nil) // fails or succeeds; the drain is what matters
	recv(t, in, "the handler to start")

	first := make(chan error, 1)
	go func() { first <- shutdownWithin(b, 100*time.Millisecond) }()
	waitFor(t, "the first shutdown to begin", func() bool {
		return errors.Is(a.Sync(ctx, b.InstanceID(), "probe", nil), velo.ErrShuttingDown)
	})
	type result struct {
		err      error
		doneSeen bool
	}
	second := make(chan result, 1)
	go func() {
		err := b.Shutdown(context.Background()) // would wait for ever if it ran its own drain
		select {
		case <-b.Done():
			second <- result{err, true}
		default:
			second <- result{err, false}
		}
	}()
	err1 := recv(t, first, "the first Shutdown")
	if !errors.Is(err1, context.DeadlineExceeded) {
		t.Fatalf("the first Shutdown cut its drain short: want DeadlineExceeded, got %v", err1)
	}
	r := recv(t, second, "the second Shutdown")
	if !r.doneSeen {
		t.Fatal("the second Shutdown returned before the first finished")
	}
	if r.err != err1 {
		t.Fatalf("the second Shutdown returned %v, the first %v", r.err, err1)
	}
	// A third, later call returns the same at once.
	if err := b.Shutdown(context.Background()); err != err1 {
		t.Fatalf("a later Shutdown returned %v", err)
	}
	hold.open()
}

// TestOwnShutdownFailsCallsWithoutDeadline: a call with no deadline to a
// peer that never answers ends with ErrShuttingDown when the caller's own
// node shuts down. The book's example of a peer that never answers: one
// that forgot the caller, so it has no route for the reply.
func TestOwnShutdownFailsCallsWithoutDeadline(t *testing.T) {
	for _, forget := range []bool{true, false} {
		name := "blocked handler"
		if forget {
			name = "remote forgot the caller"
		}
		t.Run(name, func(t *testing.T) {
			bm := newMetrics(t)
			a, b := pair(t, nil, []velo.Option{velo.WithMetrics(bm)})
			hold, in := newGate(t), make(chan struct{}, 1)
			must(t, b.Register(velo.UnaryHandler("ask", func(c *velo.Context) ([]byte, error) {
				in <- struct{}{}
				if forget {
					c.Messenger().UnregisterPeer(must1(c.SenderInstanceID()))
					return []byte("nobody gets this"), nil
				}
				hold.wait()
				return nil, nil
			})))
			must(t, a.WaitForHandler(testCtx(t), b.InstanceID(), "ask"))
			done := make(chan error, 1)
			go func() {
				_, err := a.Unary(context.Background(), b.InstanceID(), "ask", nil) // no deadline
				done <- err
			}()
			recv(t, in, "the handler to start")
			if forget {
				unknown := bm.DispatchFailures.WithLabelValues("response", "unknown_caller")
				waitFor(t, "the remote to drop the reply", func() bool { return testutil.ToFloat64(unknown) == 1 })
			}
			select {
			case err := <-done:
				t.Fatalf("the call ended before the caller shut down: %v", err)
			default:
			}
			must(t, a.Shutdown(context.Background()))
			if err := recv(t, done, "the call to fail"); !errors.Is(err, velo.ErrShuttingDown) {
				t.Fatalf("want ErrShuttingDown, got %v", err)
			}
			// Calls after the shutdown fail the same way, at once.
			if _, err := a.Unary(context.Background(), b.InstanceID(), "ask", nil); !errors.Is(err, velo.ErrShuttingDown) {
				t.Fatalf("call after shutdown: %v", err)
			}
			hold.open()
		})
	}
}

func must1[T any](v T, ok bool) T {
	if !ok {
		panic("must1: not ok")
	}
	return v
}

// TestPeerGoneMidCall: the server stops (Timeout policy) while its handler
// holds a request; the caller, which has a deadline, fails by it.
func TestPeerGoneMidCall(t *testing.T) {
	a, b := pair(t, nil, nil)
	hold, in := newGate(t), make(chan struct{}, 1)
	must(t, b.Register(velo.UnaryHandler("hang", func(c *velo.Context) ([]byte, error) {
		in <- struct{}{}
		hold.wait()
		return []byte("too late"), nil
	})))
	must(t, a.WaitForHandler(testCtx(t), b.InstanceID(), "hang"))
	const deadline = time.Second
	done := make(chan error, 1)
	var start time.Time
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), deadline)
		defer cancel()
		start = time.Now()
		_, err := a.Unary(ctx, b.InstanceID(), "hang", nil)
		done <- err
	}()
	recv(t, in, "the handler to start")
	if err := shutdownWithin(b, 50*time.Millisecond); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("server shutdown: want DeadlineExceeded for the cut drain, got %v", err)
	}
	err := recv(t, done, "the call to fail")
	if err == nil {
		t.Fatal("the call to a stopped peer succeeded")
	}
	if el := time.Since(start); el > deadline+500*time.Millisecond {
		t.Fatalf("the call failed after %v, past its %v deadline", el, deadline)
	}
	// The node goes on: a call to the dead peer fails by its deadline too.
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	if _, err := a.Unary(ctx, b.InstanceID(), "hang", nil); err == nil {
		t.Fatal("a call to the stopped peer succeeded")
	}
	hold.open()
}
