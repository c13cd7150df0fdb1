package messenger_test

import (
	"sync/atomic"
	"testing"
	"time"

	"github.com/velo-go/velo"
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
