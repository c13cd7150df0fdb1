package messenger_test

import (
	"bytes"
	"context"
	"errors"
	"runtime"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/velo-go/velo"
)

// The tests of this file pin bugs found by review and fixed; each failed
// before its fix. A test is named for the behaviour it holds; its comment
// tells the bug as it was found.

// TestOverlongHandlerNameFailsAtOnce: Messenger.request does not
// check the handler name. A name over 1,024 bytes goes on the wire, the
// remote drops the header as malformed, and the caller waits for its
// deadline (for ever without one). A name over 65,535 bytes is worse: its
// length is truncated to 16 bits in the header.
func TestOverlongHandlerNameFailsAtOnce(t *testing.T) {
	a, b := pair(t, nil, nil)
	must(t, b.Register(velo.UnaryHandler("x", func(c *velo.Context) ([]byte, error) { return nil, nil })))
	must(t, a.WaitForHandler(testCtx(t), b.InstanceID(), "x"))
	for _, n := range []int{1025, 1<<16 + 1} {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		_, err := a.Unary(ctx, b.InstanceID(), strings.Repeat("n", n), nil)
		cancel()
		if err == nil || errors.Is(err, velo.ErrRequestTimeout) {
			t.Errorf("a %d-byte handler name: want an error at once, got %v", n, err)
		}
	}
}

// TestShutdownTimeoutZeroDoesNotWaitForHandlers: Timeout(0) (a drain budget
// that ran out) means "no drain", but shutdown treats timeout 0 as
// WaitForever and waits for the blocked handler.
func TestShutdownTimeoutZeroDoesNotWaitForHandlers(t *testing.T) {
	a, b := pair(t, nil, nil)
	hold, in := newGate(t), make(chan struct{}, 1)
	must(t, b.Register(velo.SyncHandler("h", func(c *velo.Context) error { in <- struct{}{}; return hold.wait() })))
	go a.Sync(testCtx(t), b.InstanceID(), "h", nil)
	recv(t, in, "the handler to start")
	done := make(chan error, 1)
	go func() { done <- shutdownWithin(b, 0) }()
	select {
	case err := <-done:
		if !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("want DeadlineExceeded for a cut drain, got %v", err)
		}
	case <-time.After(3 * time.Second):
		hold.open()
		<-done
		t.Fatal("Shutdown(Timeout(0)) waited for the in-flight handler")
	}
	hold.open()
}

// TestTeardownRefusesQueuedOrderedRequests: the book says a
// Timeout shutdown drops accepted requests still queued when the budget
// runs out. An ordered lane runs its whole queue first: its loop checks
// the messenger's done channel only when the queue is empty, so handlers
// of queued requests run after Shutdown returned.
func TestTeardownRefusesQueuedOrderedRequests(t *testing.T) {
	sm := newMetrics(t)
	a, b := pair(t, nil, []velo.Option{velo.WithMetrics(sm)})
	ctx := testCtx(t)
	hold, in := newGate(t), make(chan struct{}, 1)
	var stopped atomic.Bool
	var late atomic.Int64
	must(t, b.Register(velo.FireHandler("o", func(c *velo.Context) {
		if unseq(c.Payload) == 0 {
			in <- struct{}{}
			hold.wait()
			return
		}
		if stopped.Load() {
			late.Add(1)
		}
	}, velo.WithOrdered())))
	must(t, a.Send(ctx, b.InstanceID(), "o", seq(0)))
	recv(t, in, "the first message to block the lane")
	for i := 1; i <= 5; i++ {
		must(t, a.Send(ctx, b.InstanceID(), "o", seq(i)))
	}
	depth := sm.Handler("o").OrderedLaneDepth
	waitFor(t, "five queued messages", func() bool { return testutil.ToFloat64(depth) == 5 })
	if err := shutdownWithin(b, 50*time.Millisecond); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("shutdown: %v", err)
	}
	stopped.Store(true)
	hold.open()
	waitFor(t, "the lane to stop", func() bool { return !goroutineRunning("(*orderedLane).loop") })
	if n := late.Load(); n != 0 {
		t.Fatalf("%d queued requests ran after Shutdown(Timeout) returned", n)
	}
}

func goroutineRunning(fn string) bool {
	buf := make([]byte, 1<<20)
	return bytes.Contains(buf[:runtime.Stack(buf, true)], []byte(fn))
}

// TestRemoteHandlersAnswersBeforeAnyCall: RemoteHandlers asks
// _list_handlers without a handshake. A remote that has not met the caller
// has no route for the answer, so the call waits for its deadline.
func TestRemoteHandlersAnswersBeforeAnyCall(t *testing.T) {
	a, b := pair(t, nil, nil)
	must(t, b.Register(velo.UnaryHandler("x", func(c *velo.Context) ([]byte, error) { return nil, nil })))
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	names, err := a.RemoteHandlers(ctx, b.InstanceID())
	if err != nil || len(names) != 1 || names[0] != "x" {
		t.Fatalf("RemoteHandlers before any call: %v, %v", names, err)
	}
}

// TestSendCopiesTheCallersPayload: Send returns once the transport
// took the frame, but a payload over 64 KiB is written from the caller's
// slice later, by the connection's writer. A caller that reuses its buffer
// after Send returned (as io.Writer users do) sends corrupted messages.
func TestSendCopiesTheCallersPayload(t *testing.T) {
	a, b := pair(t, nil, nil)
	ctx := testCtx(t)
	const n = 100
	var bad atomic.Int64
	log := newSequenceLog(n)
	must(t, b.Register(velo.FireHandler("sink", func(c *velo.Context) {
		body, tail := c.Payload[:len(c.Payload)-4], c.Payload[len(c.Payload)-4:]
		if !bytes.Equal(body, bytes.Repeat(body[:1], len(body))) || body[0] != byte(unseq(tail)) {
			bad.Add(1)
		}
		c.Payload = tail
		log.add(c)
	}, velo.WithOrdered())))
	buf := make([]byte, 100<<10)
	for i := range n {
		for j := range buf {
			buf[j] = byte(i)
		}
		copy(buf[len(buf)-4:], seq(i))
		must(t, a.Send(ctx, b.InstanceID(), "sink", buf))
	}
	recv(t, log.done, "every message")
	if k := bad.Load(); k != 0 {
		t.Fatalf("%d of %d messages changed after Send returned", k, n)
	}
}

// TestHandlerMayAnswerWithItsPayload: a handler that answers with
// its request's Payload (an echo, or a slice of the request) gets a
// corrupted answer when it is over 64 KiB. The reply frame's payload
// aliases the read buffer, the frame carries no Owner, and run() calls
// msg.Done() (which releases the buffer) before the connection's writer
// has written the reply in place. The corruption needs the buffer to be
// reused first, so this test finds it on most runs, not all; with the fix
// it passes every time.
func TestHandlerMayAnswerWithItsPayload(t *testing.T) {
	a, b := pair(t, nil, nil)
	ctx := testCtx(t)
	must(t, b.Register(velo.UnaryHandler("echo", func(c *velo.Context) ([]byte, error) { return c.Payload, nil })))
	var bad atomic.Int64
	done := make(chan struct{})
	const workers, calls = 8, 40 // 320 echoes of 200 KiB: enough to reuse read buffers many times over
	var finished atomic.Int64
	for g := range workers {
		go func() {
			defer func() {
				if finished.Add(1) == workers {
					close(done)
				}
			}()
			for i := range calls {
				p := bytes.Repeat([]byte{byte(g*calls + i)}, 200<<10)
				got, err := a.Unary(ctx, b.InstanceID(), "echo", p)
				if err != nil || !bytes.Equal(got, p) {
					bad.Add(1)
				}
			}
		}()
	}
	recv(t, done, "the echo calls")
	if n := bad.Load(); n != 0 {
		t.Fatalf("%d of %d echoes of 200 KiB came back changed", n, workers*calls)
	}
}
