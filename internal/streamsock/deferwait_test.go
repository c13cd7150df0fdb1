package streamsock

import (
	"sync/atomic"
	"testing"
	"time"

	"github.com/velo-go/velo/ext"
	"github.com/velo-go/velo/internal/frame"
)

// countWaiter is a sink's wait that counts how often the reader made it
// and reports, each time, how many responses had been routed by then.
type countWaiter struct {
	n       atomic.Int64
	routed  func() int
	atWaits chan int
}

func (w *countWaiter) Wait() {
	w.n.Add(1)
	w.atWaits <- w.routed()
}

// batchSeen is what the sink saw of one batch: its requests, whether its
// Handoff offered a hand-off, and whether it took waits.
type batchSeen struct {
	msgs              int
	handoff, deferrer bool
}

// A sink that defers a wait with its batches (ext.WaitDeferrer) has it
// made once per read, after every frame of the read is handed on: a
// response read behind requests is routed before the wait. A batch that
// frames of its read follow offers no hand-off, nor does the last batch
// of a read with waits to make (a hand-off would leave them to no one).
// A read whose connection ends drops its waits.
func TestDeferredWaitComesAfterTheRead(t *testing.T) {
	batches := make(chan batchSeen, 16)
	w := &countWaiter{atWaits: make(chan int, 16)}
	n := newHandoffNode(t, func(b []ext.InboundMessage, h ext.Handoff) {
		d, ok := h.(ext.WaitDeferrer)
		batches <- batchSeen{msgs: len(b), handoff: ok && h.Handoff(), deferrer: ok}
		ext.DoneAll(b)
		if ok {
			d.DeferWait(w)
			d.DeferWait(w) // twice in one read: waits once
		}
	}, time.Hour)
	t.Cleanup(func() {
		n.t.Shutdown()
		<-n.t.Closed()
		n.a.Close()
	})
	w.routed = func() int { return n.a.Responses().Len() }
	conn := dialRaw(t, n)
	msg := ext.Frame{Type: ext.Message, Header: make([]byte, 8), Payload: []byte("m")}
	resp := ext.Frame{Type: ext.Response, Header: make([]byte, 19)}

	// One write, one read: two requests, a response, a request.
	var buf []byte
	for _, f := range []ext.Frame{msg, msg, resp, msg} {
		buf = frame.Append(buf, f)
	}
	if _, err := conn.Write(buf); err != nil {
		t.Fatal(err)
	}
	for i, want := range []batchSeen{{msgs: 2, deferrer: true}, {msgs: 1, deferrer: true}} {
		if got := recvWithin(t, batches, "a batch"); got != want {
			t.Fatalf("batch %d: %+v, want %+v", i, got, want)
		}
	}
	if routed := recvWithin(t, w.atWaits, "the deferred wait"); routed != 1 {
		t.Fatalf("the reader waited with %d responses routed, want the one it read first", routed)
	}

	// A read with no waits pending offers its role with its last batch.
	if _, err := conn.Write(frame.Append(nil, msg)); err != nil {
		t.Fatal(err)
	}
	if got, want := recvWithin(t, batches, "a batch"), (batchSeen{msgs: 1, handoff: true, deferrer: true}); got != want {
		t.Fatalf("lone request: %+v, want %+v", got, want)
	}
	recvWithin(t, w.atWaits, "the deferred wait")

	// A read that ends the connection (a malformed frame behind a request)
	// hands its request on, and drops the wait.
	bad := append(frame.Append(nil, msg), 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff)
	if _, err := conn.Write(bad); err != nil {
		t.Fatal(err)
	}
	if got, want := recvWithin(t, batches, "a batch"), (batchSeen{msgs: 1, deferrer: true}); got != want {
		t.Fatalf("request before a malformed frame: %+v, want %+v", got, want)
	}
	expectClosed(t, conn, "the connection with a malformed frame")
	if got := w.n.Load(); got != 2 {
		t.Fatalf("the reader made %d waits, want 2 (none for the read that ended the connection)", got)
	}
}

func recvWithin[T any](t *testing.T, ch <-chan T, what string) T {
	t.Helper()
	select {
	case v := <-ch:
		return v
	case <-time.After(failAfter):
		t.Fatalf("timed out waiting for %s", what)
		panic("unreachable")
	}
}
