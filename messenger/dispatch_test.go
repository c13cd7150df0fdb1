package messenger_test

import (
	"errors"
	"fmt"
	"runtime"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/velo-go/velo"
	"github.com/velo-go/velo/ext"
)

// cluster starts one server and n callers that each registered the server.
func cluster(t testing.TB, n int, serverOpts ...velo.Option) (server *velo.Node, callers []*velo.Node) {
	t.Helper()
	server = newNode(t, serverOpts...)
	for range n {
		c := newNode(t)
		must(t, c.RegisterPeer(server.PeerInfo()))
		callers = append(callers, c)
	}
	return server, callers
}

// sequenceLog records, per sender, the sequence numbers a handler saw, and
// closes done once it has seen want messages in all.
type sequenceLog struct {
	mu   sync.Mutex
	seen map[ext.WorkerID][]int
	n    int
	want int
	done chan struct{}
}

func newSequenceLog(want int) *sequenceLog {
	return &sequenceLog{seen: map[ext.WorkerID][]int{}, want: want, done: make(chan struct{})}
}

func (l *sequenceLog) add(c *velo.Context) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.seen[c.SenderWorkerID()] = append(l.seen[c.SenderWorkerID()], unseq(c.Payload))
	if l.n++; l.n == l.want {
		close(l.done)
	}
}

// checkInOrder fails unless each caller's messages were seen as 0..per-1.
func (l *sequenceLog) checkInOrder(t testing.TB, callers []*velo.Node, per int) {
	t.Helper()
	l.mu.Lock()
	defer l.mu.Unlock()
	for i, c := range callers {
		got := l.seen[c.WorkerID()]
		if len(got) != per {
			t.Errorf("sender %d: %d messages seen, want %d", i, len(got), per)
			continue
		}
		for k, v := range got {
			if v != k {
				t.Errorf("sender %d: message %d seen in position %d (order %v...)", i, v, k, got[max(0, k-3):min(len(got), k+3)])
				break
			}
		}
	}
}

// sendAll has every caller send per numbered messages, concurrently across
// callers and in order within one, fire-and-forget or sync.
func sendAll(t testing.TB, server *velo.Node, callers []*velo.Node, handler string, per int, waitForHandler bool) {
	t.Helper()
	ctx := testCtx(t)
	var wg sync.WaitGroup
	for _, c := range callers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range per {
				var err error
				if waitForHandler {
					err = c.Sync(ctx, server.InstanceID(), handler, seq(i))
				} else {
					err = c.Send(ctx, server.InstanceID(), handler, seq(i))
				}
				if err != nil {
					t.Errorf("send %d: %v", i, err)
					return
				}
			}
		}()
	}
	wg.Wait()
}

// TestOrderedKeepsPerSenderOrder: 2 senders x 500 messages; each sender's
// messages run in the order sent.
func TestOrderedKeepsPerSenderOrder(t *testing.T) {
	const per = 500
	for _, mode := range []struct {
		name string
		sync bool
	}{{"fire-and-forget", false}, {"sync", true}} {
		t.Run(mode.name, func(t *testing.T) {
			server, callers := cluster(t, 2)
			log := newSequenceLog(2 * per)
			must(t, server.Register(velo.FireHandler("seq", log.add, velo.WithOrdered())))
			if mode.sync {
				must(t, server.Register(velo.SyncHandler("seq-sync", func(c *velo.Context) error { log.add(c); return nil }, velo.WithOrdered())))
			}
			name := "seq"
			if mode.sync {
				name = "seq-sync"
			}
			sendAll(t, server, callers, name, per, mode.sync)
			recv(t, log.done, "all messages to be handled")
			log.checkInOrder(t, callers, per)
		})
	}
}

// TestOrderedLanesRunInParallel: sender A's handler waits until sender B's
// message was handled. With one lane per sender this finishes; if the lanes
// ran one after the other, B would queue behind A and A would give up.
func TestOrderedLanesRunInParallel(t *testing.T) {
	server, callers := cluster(t, 2)
	a, b := callers[0], callers[1]
	ctx := testCtx(t)
	aIn := make(chan struct{})
	bHandled := make(chan struct{})
	must(t, server.Register(velo.SyncHandler("par", func(c *velo.Context) error {
		switch c.SenderWorkerID() {
		case a.WorkerID():
			close(aIn)
			select {
			case <-bHandled:
				return nil
			case <-ctx.Done():
				return errors.New("B's message never ran while A's lane was busy")
			}
		case b.WorkerID():
			close(bHandled)
		}
		return nil
	}, velo.WithOrdered())))
	aDone := make(chan error, 1)
	go func() { aDone <- a.Sync(ctx, server.InstanceID(), "par", nil) }()
	recv(t, aIn, "A's handler to start")
	must(t, b.Sync(ctx, server.InstanceID(), "par", nil))
	must(t, recv(t, aDone, "A's call"))
}

// TestOrderedGlobalIsOneTotalOrder: with one lane for everyone, a message of
// B that arrived while A's message ran waits for it, and runs before A's
// next message, which arrived after it. Per-sender lanes would run B's
// message at once.
func TestOrderedGlobalIsOneTotalOrder(t *testing.T) {
	sm := newMetrics(t)
	server, callers := cluster(t, 2, velo.WithMetrics(sm))
	a, b := callers[0], callers[1]
	ctx := testCtx(t)
	hold, in := newGate(t), make(chan struct{}, 1)
	var mu sync.Mutex
	var order []string
	var active, most atomic.Int64
	must(t, server.Register(velo.SyncHandler("glob", func(c *velo.Context) error {
		if n := active.Add(1); n > most.Load() {
			most.Store(n)
		}
		defer active.Add(-1)
		mu.Lock()
		order = append(order, string(c.Payload))
		mu.Unlock()
		if string(c.Payload) == "a0" {
			in <- struct{}{}
			return hold.wait()
		}
		return nil
	}, velo.WithOrderedGlobal())))
	depth := sm.Handler("glob").OrderedLaneDepth

	first := make(chan error, 1)
	go func() { first <- a.Sync(ctx, server.InstanceID(), "glob", []byte("a0")) }()
	recv(t, in, "a0 to start")
	must(t, b.Send(ctx, server.InstanceID(), "glob", []byte("b1")))
	waitFor(t, "b1 to queue", func() bool { return testutil.ToFloat64(depth) == 1 })
	must(t, a.Send(ctx, server.InstanceID(), "glob", []byte("a1")))
	waitFor(t, "a1 to queue", func() bool { return testutil.ToFloat64(depth) == 2 })
	hold.open()
	must(t, recv(t, first, "a0's call"))
	must(t, b.Sync(ctx, server.InstanceID(), "glob", []byte("b2"))) // runs after a1: same lane
	mu.Lock()
	got := slices.Clone(order)
	mu.Unlock()
	if want := []string{"a0", "b1", "a1", "b2"}; !slices.Equal(got, want) {
		t.Fatalf("order %v, want %v", got, want)
	}

	// Two busy senders: never two at once, and each sender's order kept.
	const per = 200
	log := newSequenceLog(2 * per)
	var busy, peak atomic.Int64
	must(t, server.Register(velo.FireHandler("glob-seq", func(c *velo.Context) {
		if n := busy.Add(1); n > peak.Load() {
			peak.Store(n)
		}
		runtime.Gosched()
		log.add(c)
		busy.Add(-1)
	}, velo.WithOrderedGlobal())))
	sendAll(t, server, callers, "glob-seq", per, false)
	recv(t, log.done, "all messages to be handled")
	log.checkInOrder(t, callers, per)
	if most.Load() != 1 || peak.Load() != 1 {
		t.Fatalf("a global lane ran %d/%d handlers at once", most.Load(), peak.Load())
	}
	if n := testutil.ToFloat64(sm.Handler("glob-seq").OrderedLanesCreated); n != 1 {
		t.Fatalf("a global handler made %v lanes", n)
	}
}

// TestOrderedWithMaxConcurrentOne: lanes share one permit, so at most one
// message runs at a time, and each lane keeps its order.
func TestOrderedWithMaxConcurrentOne(t *testing.T) {
	const per = 300
	server, callers := cluster(t, 2)
	log := newSequenceLog(2 * per)
	var active, peak atomic.Int64
	must(t, server.Register(velo.FireHandler("one", func(c *velo.Context) {
		if n := active.Add(1); n > peak.Load() {
			peak.Store(n)
		}
		runtime.Gosched() // widen the window for a second runner
		log.add(c)
		active.Add(-1)
	}, velo.WithOrdered(), velo.WithMaxConcurrent(1))))
	sendAll(t, server, callers, "one", per, false)
	recv(t, log.done, "all messages to be handled")
	log.checkInOrder(t, callers, per)
	if p := peak.Load(); p != 1 {
		t.Fatalf("%d handlers ran at once under WithMaxConcurrent(1)", p)
	}
}

// TestOrderedRejectShedsOverTheSoftDepth: with the lane blocked and its
// queue at MaxQueueDepth, further messages are refused, counted, and their
// callers told; another sender's lane is not affected.
func TestOrderedRejectShedsOverTheSoftDepth(t *testing.T) {
	sm := newMetrics(t)
	server, callers := cluster(t, 2, velo.WithMetrics(sm))
	a, b := callers[0], callers[1]
	ctx := testCtx(t)
	const depth, extra = 2, 5
	hold, in := newGate(t), make(chan struct{}, 1)
	var first atomic.Bool
	var ran atomic.Int64
	must(t, server.Register(velo.SyncHandler("bulk", func(c *velo.Context) error {
		ran.Add(1)
		if c.SenderWorkerID() == a.WorkerID() && first.CompareAndSwap(false, true) {
			in <- struct{}{}
			return hold.wait()
		}
		return nil
	}, velo.WithOrderedConfig(velo.OrderedConfig{MaxQueueDepth: depth, Overflow: velo.Reject}))))
	// Handshakes first, so that only "bulk" requests are counted below.
	must(t, b.WaitForHandler(ctx, server.InstanceID(), "bulk"))

	results := make(chan error, extra+1)
	go func() { results <- a.Sync(ctx, server.InstanceID(), "bulk", nil) }()
	recv(t, in, "the first message to block the lane")
	for range extra {
		go func() { results <- a.Sync(ctx, server.InstanceID(), "bulk", nil) }()
	}
	// depth messages queue; the rest are shed and fail at once.
	for range extra - depth {
		err := recv(t, results, "a shed call")
		re := remoteErr(t, err)
		if re.Handler != "bulk" || !strings.Contains(re.Message, "ordered lane is full") {
			t.Fatalf("shed call: %v", err)
		}
	}
	shed := sm.DispatchFailures.WithLabelValues("dispatch", "ordered_lane_shed")
	if n := testutil.ToFloat64(shed); n != extra-depth {
		t.Fatalf("ordered_lane_shed = %v, want %d", n, extra-depth)
	}
	// B has its own lane: A's full lane sheds nothing of B's.
	must(t, b.Sync(ctx, server.InstanceID(), "bulk", nil))

	hold.open()
	for range depth + 1 {
		must(t, recv(t, results, "a queued call"))
	}
	if n := ran.Load(); n != depth+2 {
		t.Fatalf("handler ran %d times, want %d (queued + first + B)", n, depth+2)
	}
	if n := testutil.ToFloat64(shed); n != extra-depth {
		t.Fatalf("ordered_lane_shed = %v after the release", n)
	}
}

// TestIdleLanesStop: a lane idle for its TTL stops (the lane gauge returns
// to zero), and the next message starts a fresh one.
func TestIdleLanesStop(t *testing.T) {
	sm := newMetrics(t)
	server, callers := cluster(t, 2, velo.WithMetrics(sm))
	ctx := testCtx(t)
	must(t, server.Register(velo.SyncHandler("idle", func(c *velo.Context) error { return nil },
		velo.WithOrderedConfig(velo.OrderedConfig{IdleLaneTTL: 50 * time.Millisecond}))))
	hm := sm.Handler("idle")
	for _, c := range callers {
		must(t, c.Sync(ctx, server.InstanceID(), "idle", nil))
	}
	if n := testutil.ToFloat64(hm.OrderedLanesCreated); n != 2 {
		t.Fatalf("%v lanes made for two senders", n)
	}
	waitFor(t, "idle lanes to stop", func() bool { return testutil.ToFloat64(hm.OrderedLanes) == 0 })
	must(t, callers[0].Sync(ctx, server.InstanceID(), "idle", nil))
	if n := testutil.ToFloat64(hm.OrderedLanesCreated); n != 3 {
		t.Fatalf("lanes created %v, want a fresh third one", n)
	}
	waitFor(t, "the fresh lane to stop", func() bool { return testutil.ToFloat64(hm.OrderedLanes) == 0 })
}

// TestHandlerPanicFailsItsCaller: a panic becomes an error for the waiting
// caller in every dispatch mode, and an ordered lane (and its permit) goes
// on with the next message.
func TestHandlerPanicFailsItsCaller(t *testing.T) {
	a, b := pair(t, nil, nil)
	ctx := testCtx(t)
	modes := []struct {
		name string
		opts []velo.HandlerOption
	}{
		{"spawn", nil},
		{"ordered", []velo.HandlerOption{velo.WithOrdered()}},
		{"ordered-global", []velo.HandlerOption{velo.WithOrderedGlobal()}},
		{"ordered-max1", []velo.HandlerOption{velo.WithOrdered(), velo.WithMaxConcurrent(1)}},
		{"spawn-max1", []velo.HandlerOption{velo.WithMaxConcurrent(1)}},
		{"inline", []velo.HandlerOption{velo.WithInline()}},
	}
	for _, m := range modes {
		t.Run(m.name, func(t *testing.T) {
			unary, syncName := "u-"+m.name, "s-"+m.name
			must(t, b.Register(velo.UnaryHandler(unary, func(c *velo.Context) ([]byte, error) {
				if string(c.Payload) == "panic" {
					panic("kaboom " + m.name)
				}
				return c.Payload, nil
			}, m.opts...)))
			must(t, b.Register(velo.SyncHandler(syncName, func(c *velo.Context) error {
				panic(fmt.Errorf("sync kaboom"))
			}, m.opts...)))
			for i := range 3 {
				got, err := a.Unary(ctx, b.InstanceID(), unary, []byte("panic"))
				re := remoteErr(t, err)
				if re.Handler != unary || !strings.Contains(re.Message, "panic") || !strings.Contains(re.Message, "kaboom "+m.name) {
					t.Fatalf("panic %d: %+v (%q)", i, re, got)
				}
				// The next message on the same lane runs.
				got, err = a.Unary(ctx, b.InstanceID(), unary, []byte("fine"))
				must(t, err)
				if string(got) != "fine" {
					t.Fatalf("after the panic: %q", got)
				}
			}
			err := a.Sync(ctx, b.InstanceID(), syncName, nil)
			if re := remoteErr(t, err); !strings.Contains(re.Message, "panic") {
				t.Fatalf("sync panic: %v", err)
			}
		})
	}
}
