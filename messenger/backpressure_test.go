package messenger_test

import (
	"encoding/binary"
	"runtime"
	"sync/atomic"
	"testing"
	"time"

	"github.com/velo-go/velo"
	"github.com/velo-go/velo/ext"
	"github.com/velo-go/velo/internal/frame"
	"github.com/velo-go/velo/messenger"
)

// TestSpawnQueueBoundOverTCP: a sender that pipelines one-way messages to
// a receiver whose queue bound is small is held back by the receiver's
// reader (and TCP) instead of the receiver's queue growing: every message
// is handled, and the queue never held more than its bound and a read.
func TestSpawnQueueBoundOverTCP(t *testing.T) {
	const limit, n = 64, 50_000
	a, b := pair(t, nil, []velo.Option{velo.WithSpawnQueue(limit, 0)})
	seen := newTally(n)
	must(t, b.Register(velo.FireHandler("sink", func(*velo.Context) { seen.add() })))
	ctx := testCtx(t)
	must(t, a.WaitForHandler(ctx, b.InstanceID(), "sink"))
	payload := make([]byte, 64)
	for range n {
		must(t, a.Send(ctx, b.InstanceID(), "sink", payload))
	}
	seen.wait(t, "the handler saw")
	maxQ, pauses := b.Messenger().SpawnQueueStats("sink")
	t.Logf("%d messages: at most %d queued (bound %d), %d reader waits", n, maxQ, limit, pauses)
	// A read brings at most a read buffer's worth: 64 KiB of frames of
	// about 100 bytes each.
	if maxQ > limit+1024 {
		t.Fatalf("the queue held %d requests with a bound of %d", maxQ, limit)
	}
}

// TestSpawnQueueCappedHandlersCallBack: handlers under WithMaxConcurrent
// call back the node that floods them, so their answers come behind the
// flood. A reader that waited for the queue to go down while the capped
// handlers wait on those answers would never read them. Every message must
// be handled.
func TestSpawnQueueCappedHandlersCallBack(t *testing.T) {
	const n = 3000
	a, b := pair(t, nil, []velo.Option{velo.WithSpawnQueue(16, 0)})
	must(t, b.RegisterPeer(a.PeerInfo()))
	must(t, a.Register(velo.UnaryHandler("echo", func(c *velo.Context) ([]byte, error) { return c.Payload, nil })))
	seen := newTally(n)
	ctx := testCtx(t)
	must(t, b.Register(velo.FireHandler("relay", func(c *velo.Context) {
		if _, err := b.Unary(ctx, a.InstanceID(), "echo", []byte("x")); err != nil {
			t.Error(err)
		}
		seen.add()
	}, velo.WithMaxConcurrent(2))))
	must(t, a.WaitForHandler(ctx, b.InstanceID(), "relay"))
	must(t, b.WaitForHandler(ctx, a.InstanceID(), "echo"))
	payload := make([]byte, 64)
	for range n {
		must(t, a.Send(ctx, b.InstanceID(), "relay", payload))
	}
	seen.wait(t, "the handlers ran")
}

// TestSpawnQueueWaitAfterTheRead: one read brings a node (b) requests
// that take a spawn queue over its bound and, behind them, the answer to a
// call of b's own. The reader routes the answer before it waits for the
// queue: the call completes while the reader waits and while every handler
// the requests started is still blocked. When the reader waited as soon as
// the requests were queued (in the middle of its read), the answer, already
// read, stayed behind the wait until the queue went down to half.
//
// The frames come on a raw connection, bound to node a (proveAs), so that
// they are written in one piece while b's reader is held in an inline
// handler: the reader's next read takes them all. The test fails (its
// call times out) when the reader waits before it routed the answer.
func TestSpawnQueueWaitAfterTheRead(t *testing.T) {
	// An idle connection is read 4 KiB at a time: 64 requests of 37 bytes
	// and the answer fit in one read. GOMAXPROCS(1) keeps the workers the
	// read starts from taking the queue down before the reader is done
	// with the read, as on a busy receiver, so that the reader waits.
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(1))
	const limit, n = 8, 64
	a, b := pair(t, nil, []velo.Option{velo.WithSpawnQueue(limit, 0)})
	must(t, b.RegisterPeer(a.PeerInfo()))
	ctx := testCtx(t)
	held, holdOn := make(chan struct{}, 1), newGate(t)
	must(t, b.Register(velo.FireHandler("hold", func(*velo.Context) {
		held <- struct{}{}
		holdOn.wait()
	}, velo.WithInline())))
	seen, sinksOn := newTally(n), newGate(t)
	must(t, b.Register(velo.FireHandler("sink", func(*velo.Context) { sinksOn.wait(); seen.add() })))
	ids, slowOn := make(chan messenger.ResponseID, 1), newGate(t)
	must(t, a.Register(velo.UnaryHandler("slow", func(c *velo.Context) ([]byte, error) {
		ids <- messenger.ResponseIDOf(c)
		slowOn.wait()
		return []byte("late"), nil
	})))
	must(t, a.WaitForHandler(ctx, b.InstanceID(), "sink"))
	paused, readerOn := make(chan struct{}, 1), newGate(t)
	b.Messenger().OnSpawnPause("sink", func() {
		select {
		case paused <- struct{}{}:
		default:
		}
		readerOn.wait()
	})
	conn := rawConn(t, b)
	proveAs(t, conn, a)

	answer := make(chan string, 1)
	go func() {
		resp, err := b.Unary(ctx, a.InstanceID(), "slow", nil)
		if err != nil {
			resp = []byte("error: " + err.Error())
		}
		answer <- string(resp)
	}()
	id := recv(t, ids, "b's call to reach a")

	w := uint64(a.WorkerID())
	_, err := conn.Write(frame.Append(nil, ext.Frame{Type: ext.Message, Header: wireRequestHeader(0, w, 0, "hold", nil)}))
	must(t, err)
	recv(t, held, "b's reader to run the inline handler")
	var buf []byte
	for range n {
		buf = frame.Append(buf, ext.Frame{Type: ext.Message, Header: wireRequestHeader(0, w, 0, "sink", nil)})
	}
	hdr := binary.LittleEndian.AppendUint16(append(id.AppendLE(nil), 0), 0) // outcome OK, no headers
	buf = frame.Append(buf, ext.Frame{Type: ext.Response, Header: hdr, Payload: []byte("early")})
	_, err = conn.Write(buf)
	must(t, err)
	holdOn.open() // b's reader reads on: all of buf, in one read

	if got := recv(t, answer, "the answer read behind the requests, while the reader waits"); got != "early" {
		t.Fatalf("b's call returned %q, want the answer in the read", got)
	}
	recv(t, paused, "b's reader to wait for the sink's queue")
	if got := seen.runs.Load(); got != 0 {
		t.Fatalf("%d sink handlers returned while their gate was shut", got)
	}
	readerOn.open()
	sinksOn.open()
	seen.wait(t, "the handler saw")
}

// tally counts handler runs and signals when the n-th one ends.
type tally struct {
	n    int64
	runs atomic.Int64
	all  chan struct{}
}

func newTally(n int64) *tally { return &tally{n: n, all: make(chan struct{})} }

func (c *tally) add() {
	if c.runs.Add(1) == c.n {
		close(c.all)
	}
}

// wait fails t unless all n runs end within failAfter.
func (c *tally) wait(t *testing.T, what string) {
	t.Helper()
	select {
	case <-c.all:
	case <-time.After(failAfter):
		t.Fatalf("%s %d of %d messages", what, c.runs.Load(), c.n)
	}
}
