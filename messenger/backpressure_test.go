package messenger_test

import (
	"encoding/binary"
	"runtime"
	"sync"
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
	// A read brings at most a read buffer's worth: 128 KiB of frames of
	// about 100 bytes each. A read of one-way messages that its reader
	// runs itself (runClaimed) is queued whole first; if that run is
	// handed on, what it left joins the follower's first read before the
	// follower waits: two reads' worth.
	if maxQ > limit+2*(128<<10)/100 {
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

// TestSpawnQueueNodesFloodEachOther: two nodes with small bounds flood
// each other with one-way messages whose handlers each call the other node
// and wait for its answer. Each node's reader then carries, behind the
// flood it waits for, the answers its own handlers wait on, and each
// node's handlers hold the other's answers back while they wait. A wait
// that depended on a handler would stall both; every message must be
// handled and every call answered.
func TestSpawnQueueNodesFloodEachOther(t *testing.T) {
	const n = 3000
	opts := []velo.Option{velo.WithSpawnQueue(8, 0)}
	a, b := pair(t, opts, opts)
	must(t, b.RegisterPeer(a.PeerInfo()))
	ctx := testCtx(t)
	seen := newTally(2 * n)
	nodes := [][2]*velo.Node{{a, b}, {b, a}}
	for _, pr := range nodes {
		self, other := pr[0], pr[1]
		must(t, self.Register(velo.UnaryHandler("echo", func(c *velo.Context) ([]byte, error) { return c.Payload, nil })))
		must(t, self.Register(velo.FireHandler("flood", func(c *velo.Context) {
			if _, err := self.Unary(ctx, other.InstanceID(), "echo", c.Payload); err != nil {
				t.Error(err)
			}
			seen.add()
		})))
	}
	for _, pr := range nodes {
		must(t, pr[0].WaitForHandler(ctx, pr[1].InstanceID(), "flood"))
		must(t, pr[0].WaitForHandler(ctx, pr[1].InstanceID(), "echo"))
	}
	var wg sync.WaitGroup
	payload := make([]byte, 64)
	for _, pr := range nodes {
		wg.Go(func() {
			for range n {
				if err := pr[0].Send(ctx, pr[1].InstanceID(), "flood", payload); err != nil {
					t.Error(err)
					return
				}
			}
		})
	}
	wg.Wait()
	seen.wait(t, "the handlers ran")
	for _, pr := range nodes {
		maxQ, pauses := pr[0].Messenger().SpawnQueueStats("flood")
		eq, ep := pr[0].Messenger().SpawnQueueStats("echo")
		t.Logf("%s: flood queue at most %d, %d waits; echo queue at most %d, %d waits", pr[0].InstanceID(), maxQ, pauses, eq, ep)
	}
}

// TestSpawnQueueLoopbackFromHandlers: handlers of a node flooded over TCP
// send to the node itself, to a handler whose queue is over its bound. A
// send through the loopback is a reader's part done on the sender's
// goroutine, with no sign of what follows, so the sending handler waits
// there for the queue as a reader would, while the connection's reader
// waits for the same queue. Neither wait may depend on the other or on a
// handler: every message must be handled.
func TestSpawnQueueLoopbackFromHandlers(t *testing.T) {
	const n, fan = 500, 8
	a, b := pair(t, nil, []velo.Option{velo.WithSpawnQueue(8, 0)})
	ctx := testCtx(t)
	seen := newTally(n * (fan + 1))
	must(t, b.Register(velo.FireHandler("sink", func(*velo.Context) { seen.add() })))
	must(t, b.Register(velo.FireHandler("fan", func(c *velo.Context) {
		for range fan {
			if err := b.Send(ctx, b.InstanceID(), "sink", c.Payload); err != nil {
				t.Error(err)
			}
		}
	})))
	must(t, a.WaitForHandler(ctx, b.InstanceID(), "fan"))
	payload := make([]byte, 64)
	for i := range 2 * n {
		to := "sink"
		if i%2 == 0 {
			to = "fan"
		}
		must(t, a.Send(ctx, b.InstanceID(), to, payload))
	}
	seen.wait(t, "the handlers ran")
	maxQ, pauses := b.Messenger().SpawnQueueStats("sink")
	t.Logf("sink queue at most %d, %d waits (readers and loopback senders)", maxQ, pauses)
}

// TestSpawnQueuePeerLostDuringAWait: the peer goes away while the reader
// of its connection waits for a queue its requests took over the bound.
// What the peer sent before it left was admitted or is still in the
// socket; all of it must run (the reader reads the rest once the wait
// ends, then meets the end of the connection and drops its waits). The
// first message's handler blocks until the reader waits: a read of
// one-way messages to an idle pool runs on its reader (runClaimed), which
// then never waits for a queue it takes down itself; blocked, it loses its
// connection to a follower at the bound and the rest of its read to a
// worker, and the follower's reads queue behind that worker.
func TestSpawnQueuePeerLostDuringAWait(t *testing.T) {
	const limit, perWrite, writes = 8, 64, 20
	a, b := pair(t, nil, []velo.Option{velo.WithSpawnQueue(limit, 0)})
	ctx := testCtx(t)
	seen := newTally(perWrite * writes)
	paused, closed := make(chan struct{}), newGate(t)
	must(t, b.Register(velo.FireHandler("sink", func(c *velo.Context) {
		if len(c.Payload) > 0 {
			<-paused
		}
		seen.add()
	})))
	must(t, a.WaitForHandler(ctx, b.InstanceID(), "sink"))
	var first sync.Once
	b.Messenger().OnSpawnPause("sink", func() {
		first.Do(func() {
			close(paused)
			closed.wait() // the first wait lasts until the peer is gone
		})
	})
	conn := rawConn(t, b)
	proveAs(t, conn, a)
	w := uint64(a.WorkerID())
	var buf []byte
	for range perWrite {
		buf = frame.Append(buf, ext.Frame{Type: ext.Message, Header: wireRequestHeader(0, w, 0, "sink", nil)})
	}
	// The first write's first message carries a payload: its handler
	// blocks. The total stays perWrite*writes.
	one := len(buf) / perWrite
	blocking := frame.Append(nil, ext.Frame{Type: ext.Message, Header: wireRequestHeader(0, w, 0, "sink", nil), Payload: []byte("block")})
	blocking = append(blocking, buf[one:]...)
	for i := range writes {
		out := buf
		if i == 0 {
			out = blocking
		}
		_, err := conn.Write(out)
		must(t, err)
	}
	recv(t, paused, "b's reader to wait for the sink's queue")
	must(t, conn.Close())
	closed.open()
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
