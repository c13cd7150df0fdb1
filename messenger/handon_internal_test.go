package messenger

import (
	"context"
	"errors"
	"runtime"
	"sync/atomic"
	"testing"

	"github.com/velo-go/velo/ext"
)

// handOnRecorder is a reader's offer that counts the sink's asks to pass
// the role on at once.
type handOnRecorder struct{ now atomic.Int64 }

func (h *handOnRecorder) Handoff() bool { return true }
func (h *handOnRecorder) HandOnNow()    { h.now.Add(1) }

// A spawn handler that runs on its reader and asks for its context.Context
// has the reader hand its connection on at once: a call it then makes may
// be answered on that very connection, and a cancel or the connection's
// end comes only by reading it. Left to the transport's timer, which fires
// late in an idle process (a millisecond or more), a handler calling back
// its caller waited that long for each answer (cmd/velo-bench/nested:
// p50 ~20 µs before the lazy hand-off, 165-290 µs with it, ~20 µs again
// with this). A handler that does not ask keeps the lazy hand-off.
func TestInlineHandlerAskingForItsContextHandsOn(t *testing.T) {
	m := simMessenger(t)
	if err := m.Register(FireHandler("asks", func(c *Context) {
		_ = c.Context()
		_ = c.Context() // the second ask finds the context made: no second hand-off
	})); err != nil {
		t.Fatal(err)
	}
	if err := m.Register(FireHandler("quiet", func(c *Context) {})); err != nil {
		t.Fatal(err)
	}
	expectHandOns(t, m, map[string]int64{"quiet": 0, "asks": 1})
}

// A call made while a request runs on a reader has that reader hand its
// connection on, whether or not the handler asked for its context: the
// call's answer may come on that very connection (a handler calling back
// its caller with context.Background()). A one-way send waits for no
// answer and leaves the run alone.
func TestCallDuringInlineRunHandsOn(t *testing.T) {
	m := simMessenger(t)
	var callErr error
	stranger := ext.NewInstanceID()
	if err := m.Register(FireHandler("calls", func(c *Context) {
		_, callErr = m.Unary(context.Background(), stranger, "elsewhere", nil)
	})); err != nil {
		t.Fatal(err)
	}
	var asyncErr error
	if err := m.Register(FireHandler("calls-async", func(c *Context) {
		asyncErr = m.UnaryAsync(context.Background(), stranger, "elsewhere", nil, func([]byte, error) {})
	})); err != nil {
		t.Fatal(err)
	}
	if err := m.Register(FireHandler("sends", func(c *Context) {
		_ = m.Send(context.Background(), stranger, "elsewhere", nil)
	})); err != nil {
		t.Fatal(err)
	}
	expectHandOns(t, m, map[string]int64{"sends": 0, "calls": 1, "calls-async": 1})
	if !errors.Is(callErr, ErrPeerNotRegistered) {
		t.Fatalf("the call to an unknown peer: %v, want ErrPeerNotRegistered", callErr)
	}
	if !errors.Is(asyncErr, ErrPeerNotRegistered) {
		t.Fatalf("the async call to an unknown peer: %v, want ErrPeerNotRegistered", asyncErr)
	}
	if n := m.onReaders.Load(); n != 0 {
		t.Fatalf("onReaders %d after the runs, want 0", n)
	}
}

// expectHandOns runs one request to each named handler of m on a
// recording reader, as the reader's batch brings it past the identity
// gate (spawnBatch.finish runs it on the reader: tryInline), and checks
// how many times the run asked the reader to hand its connection on.
func expectHandOns(t *testing.T, m *Messenger, want map[string]int64) {
	t.Helper()
	for handler, n := range want {
		h := &handOnRecorder{}
		msg := ext.InboundMessage{Frame: ext.Frame{Header: appendRequestHeader(nil, FireAndForget, ResponseID{Lo: 1, Hi: 2}, handler, nil), Payload: []byte("x")}}
		var j job
		initJob(&j, &msg)
		if err := parseRequestHeaderInto(msg.Header, &j.hdr); err != nil {
			t.Fatal(err)
		}
		r := (*m.handlers.Load())[handler]
		if !r.pool.tryInline(r, &j, h) {
			t.Fatalf("%s: the request did not run on the reader", handler)
		}
		if got := h.now.Load(); got != n {
			t.Errorf("%s: the reader was asked to hand on %d times, want %d", handler, got, n)
		}
	}
}

// A handler run on its reader that calls runtime.Goexit (t.FailNow from a
// handler, say) ends the reader's goroutine with it, past the end of
// tryInline. What the run held must still be given back: the node's count
// of runs on readers (left at 1, every later call of the node would hand
// on every inline run), the pool's place (left held, the pool would never
// run on a reader again, and under WithMaxConcurrent would lose a worker)
// and its reader, the node's running count; and the connection, whose
// reader is gone, must go to a follower at once.
func TestInlineRunGoexitGivesBack(t *testing.T) {
	m := simMessenger(t)
	if err := m.Register(FireHandler("exits", func(c *Context) { runtime.Goexit() })); err != nil {
		t.Fatal(err)
	}
	r := (*m.handlers.Load())["exits"]
	h := &handOnRecorder{}
	msg := ext.InboundMessage{Frame: ext.Frame{Header: appendRequestHeader(nil, FireAndForget, ResponseID{Lo: 1, Hi: 2}, "exits", nil), Payload: []byte("x")}}
	var j job
	initJob(&j, &msg)
	if err := parseRequestHeaderInto(msg.Header, &j.hdr); err != nil {
		t.Fatal(err)
	}
	returned := make(chan bool, 1)
	go func() {
		ok := false
		defer func() { returned <- ok }()
		r.pool.tryInline(r, &j, h)
		ok = true
	}()
	if <-returned {
		t.Fatal("tryInline returned: the handler's Goexit did not end the goroutine")
	}
	if n := m.onReaders.Load(); n != 0 {
		t.Errorf("onReaders %d after the run, want 0", n)
	}
	if n := m.runs.Load(); n != 0 {
		t.Errorf("the node counts %d running handlers after the run, want 0", n)
	}
	if !m.SpawnIdle("exits") {
		t.Errorf("the pool is not idle after the run: its place stays held")
	}
	r.pool.mu.Lock()
	stale := r.pool.onReader != nil
	r.pool.mu.Unlock()
	if stale {
		t.Errorf("the pool keeps the gone reader as the one its run is on")
	}
	if n := h.now.Load(); n != 1 {
		t.Errorf("the reader was asked to hand on %d times, want 1", n)
	}
}
