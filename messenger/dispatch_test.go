package messenger_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
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
	"github.com/velo-go/velo/metrics"
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

// logRecords is a slog handler that keeps the messages it is given.
type logRecords struct {
	mu   sync.Mutex
	msgs []string
}

func (l *logRecords) Enabled(context.Context, slog.Level) bool { return true }
func (l *logRecords) WithAttrs([]slog.Attr) slog.Handler       { return l }
func (l *logRecords) WithGroup(string) slog.Handler            { return l }
func (l *logRecords) Handle(_ context.Context, r slog.Record) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.msgs = append(l.msgs, r.Message)
	return nil
}

func (l *logRecords) containing(s string) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	n := 0
	for _, m := range l.msgs {
		if strings.Contains(m, s) {
			n++
		}
	}
	return n
}

// overDepth drives one ordered lane of depth 2 past its soft depth twice,
// under policy, and checks what each message met. Sender A's messages are
// numbered 0..5; 0 and 1 hold the lane until released.
//
//   - 0 runs and holds; 1 and 2 fill the lane; 3 arrives over the depth.
//   - 0 is released: the lane takes 1, 2 (and 3) off its queue at once and
//     runs 1, which holds. 2 still waits, so the depth is 1 (2 with 3):
//     a lane that measured only its queue would take both 4 and 5 as
//     under the depth.
//   - 4 and 5 arrive; then everything is released.
//
// Meanwhile sender B's lane is not affected, and A's connection goes on
// carrying its other calls: nothing waits on the reader.
func overDepth(t *testing.T, policy velo.OverflowPolicy) (results []error, order []int, sm *metrics.VeloMetrics, logs *logRecords) {
	sm, logs = newMetrics(t), &logRecords{}
	server, callers := cluster(t, 2, velo.WithMetrics(sm), velo.WithLogger(slog.New(logs)))
	a, b := callers[0], callers[1]
	ctx := testCtx(t)
	gates := []*gate{newGate(t), newGate(t)}
	in := make(chan int, 2)
	var mu sync.Mutex
	must(t, server.Register(velo.UnaryHandler("bulk", func(c *velo.Context) ([]byte, error) {
		if c.SenderWorkerID() != a.WorkerID() {
			return nil, nil
		}
		i := unseq(c.Payload)
		mu.Lock()
		order = append(order, i)
		mu.Unlock()
		if i < len(gates) {
			in <- i
			return nil, gates[i].wait()
		}
		return nil, nil
	}, velo.WithOrderedConfig(velo.OrderedConfig{MaxQueueDepth: 2, Overflow: policy}))))
	must(t, server.Register(velo.UnaryHandler("ping", func(c *velo.Context) ([]byte, error) {
		return []byte("pong"), nil
	})))
	for _, c := range callers {
		must(t, c.WaitForHandler(ctx, server.InstanceID(), "bulk"))
	}
	depth := sm.Handler("bulk").OrderedLaneDepth
	var calls []<-chan result
	call := func(i int) { calls = append(calls, callAsync(t, ctx, a, server.InstanceID(), "bulk", seq(i))) }
	// queued waits until the lane holds n messages, or (Reject) until
	// message i came back refused.
	queued := func(n, i int) {
		if policy == velo.Reject {
			res := recv(t, calls[i], "a refused call")
			calls[i] = nil
			results[i] = res.err
			return
		}
		waitFor(t, "messages to queue", func() bool { return testutil.ToFloat64(depth) == float64(n) })
	}
	results = make([]error, 6)

	call(0)
	if got := recv(t, in, "message 0 to hold the lane"); got != 0 {
		t.Fatalf("message %d ran first", got)
	}
	call(1)
	call(2)
	call(3)
	queued(3, 3)
	// A's connection still carries other calls, and B's lane is its own.
	if resp, err := a.Unary(ctx, server.InstanceID(), "ping", nil); err != nil || string(resp) != "pong" {
		t.Fatalf("a call on the connection of the full lane: %q, %v", resp, err)
	}
	if _, err := b.Unary(ctx, server.InstanceID(), "bulk", nil); err != nil {
		t.Fatalf("another sender's lane: %v", err)
	}

	gates[0].open()
	if got := recv(t, in, "message 1 to hold the lane"); got != 1 {
		t.Fatalf("message %d ran second", got)
	}
	call(4)
	call(5)
	queued(4, 5)
	gates[1].open()
	for i, ch := range calls {
		if ch != nil {
			results[i] = recv(t, ch, "a call").err
		}
	}
	mu.Lock()
	defer mu.Unlock()
	return results, slices.Clone(order), sm, logs
}

// TestOrderedRejectShedsOverTheSoftDepth: under Reject, a message that
// finds MaxQueueDepth messages waiting on its lane is refused at once with
// ErrLaneFull (which the caller matches with errors.Is) and counted; the
// others run, in order. Messages the lane took off its queue and has not
// reached still count toward its depth.
func TestOrderedRejectShedsOverTheSoftDepth(t *testing.T) {
	results, order, sm, logs := overDepth(t, velo.Reject)
	for i, err := range results {
		shed := i == 3 || i == 5
		switch {
		case shed && !errors.Is(err, velo.ErrLaneFull):
			t.Errorf("message %d: %v, want ErrLaneFull", i, err)
		case shed && remoteErr(t, err).Handler != "bulk":
			t.Errorf("message %d: %v does not name the handler", i, err)
		case !shed && err != nil:
			t.Errorf("message %d: %v, want it run", i, err)
		}
	}
	if want := []int{0, 1, 2, 4}; !slices.Equal(order, want) {
		t.Errorf("ran %v, want %v", order, want)
	}
	if n := testutil.ToFloat64(sm.DispatchFailures.WithLabelValues("dispatch", "ordered_lane_shed")); n != 2 {
		t.Errorf("ordered_lane_shed = %v, want 2", n)
	}
	if n := logs.containing("ordered lane"); n != 1 {
		t.Errorf("%d log lines about the full lane, want 1 (at most one per handler every 10 s)", n)
	}
}

// TestOrderedWarnQueuesOverTheSoftDepth: under Warn (the default), a
// message over the soft depth is queued all the same, counted in
// velo_messenger_ordered_lane_over_depth_total, and logged at most once a
// while; everything runs in order and nothing is refused.
func TestOrderedWarnQueuesOverTheSoftDepth(t *testing.T) {
	results, order, sm, logs := overDepth(t, velo.Warn)
	for i, err := range results {
		if err != nil {
			t.Errorf("message %d: %v, want it run", i, err)
		}
	}
	if want := []int{0, 1, 2, 3, 4, 5}; !slices.Equal(order, want) {
		t.Errorf("ran %v, want %v", order, want)
	}
	// 3 (behind 1, 2), then 4 (behind 2, 3) and 5 (behind 2, 3, 4).
	if n := testutil.ToFloat64(sm.Handler("bulk").OrderedLaneOverDepth); n != 3 {
		t.Errorf("over-depth messages counted: %v, want 3", n)
	}
	if n := testutil.ToFloat64(sm.DispatchFailures.WithLabelValues("dispatch", "ordered_lane_shed")); n != 0 {
		t.Errorf("Warn shed %v messages", n)
	}
	if n := logs.containing("ordered lane"); n != 1 {
		t.Errorf("%d log lines about the lane over its depth, want 1 (at most one per handler every 10 s)", n)
	}
}

// TestHandlerCallsBackItsCallerUnderAFullLane: a handler that makes a
// unary call to the node that sent it the request finishes while its lane
// is far over its soft depth. The answer to that call comes back on the
// connection that also carries the queued requests; when a full lane made
// the reader wait for room (the old Block policy), the answer was never
// read and the handler, its lane and its caller waited for ever. With a
// global lane, every sender's connection is in the same position.
func TestHandlerCallsBackItsCallerUnderAFullLane(t *testing.T) {
	for _, mode := range []struct {
		name    string
		global  bool
		callers int
	}{{"per-sender", false, 1}, {"global", true, 2}} {
		t.Run(mode.name, func(t *testing.T) {
			const per = 5
			sm := newMetrics(t)
			server, callers := cluster(t, mode.callers, velo.WithMetrics(sm))
			ctx := testCtx(t)
			for _, c := range callers {
				must(t, c.Register(velo.UnaryHandler("ping", func(*velo.Context) ([]byte, error) { return []byte("pong"), nil })))
			}
			hold := newGate(t)
			var first atomic.Bool
			must(t, server.Register(velo.UnaryHandler("work", func(c *velo.Context) ([]byte, error) {
				if first.CompareAndSwap(false, true) {
					hold.wait()
				}
				sender, ok := c.SenderInstanceID()
				if !ok {
					return nil, errors.New("sender unknown after its handshake")
				}
				return c.Messenger().Unary(ctx, sender, "ping", nil)
			}, velo.WithOrderedConfig(velo.OrderedConfig{Global: mode.global, MaxQueueDepth: 1}))))
			for _, c := range callers {
				must(t, c.WaitForHandler(ctx, server.InstanceID(), "work"))
			}
			var results []<-chan result
			for _, c := range callers {
				for range per {
					results = append(results, callAsync(t, ctx, c, server.InstanceID(), "work", nil))
				}
			}
			total := per * mode.callers
			depth := sm.Handler("work").OrderedLaneDepth
			lanes := total - mode.callers // one running per lane (global: one in all)
			if mode.global {
				lanes = total - 1
			}
			waitFor(t, "the lane to fill past its depth", func() bool { return testutil.ToFloat64(depth) == float64(lanes) })
			hold.open()
			for i, ch := range results {
				if res := recv(t, ch, "a call whose handler calls back"); res.err != nil || string(res.resp) != "pong" {
					t.Fatalf("call %d: %q, %v", i, res.resp, res.err)
				}
			}
			if n := testutil.ToFloat64(sm.Handler("work").OrderedLaneOverDepth); n == 0 {
				t.Fatal("the lane never went over its depth: the test proved nothing")
			}
		})
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

// TestSpawnContextsOutliveTheirRun: a spawn worker hands its requests'
// Contexts out of blocks (contextSlab), but never the same one twice: a
// Context a handler keeps past its return is its own, after many more
// requests ran on the same worker.
func TestSpawnContextsOutliveTheirRun(t *testing.T) {
	a, b := pair(t, nil, nil)
	ctx := testCtx(t)
	var mu sync.Mutex
	var kept []*velo.Context
	must(t, b.Register(velo.UnaryHandler("keep", func(c *velo.Context) ([]byte, error) {
		mu.Lock()
		defer mu.Unlock()
		kept = append(kept, c)
		return nil, nil
	})))
	const calls = 200 // three blocks and some
	for range calls {
		if _, err := a.Unary(ctx, b.InstanceID(), "keep", nil); err != nil {
			t.Fatal(err)
		}
	}
	mu.Lock()
	defer mu.Unlock()
	if len(kept) != calls {
		t.Fatalf("%d handler runs, want %d", len(kept), calls)
	}
	seen := map[*velo.Context]bool{}
	for i, c := range kept {
		if seen[c] {
			t.Fatalf("call %d got a Context an earlier call had", i)
		}
		seen[c] = true
		if c.Handler != "keep" {
			t.Fatalf("call %d's Context now names handler %q", i, c.Handler)
		}
	}
}

// TestInterleavedHandlersInOneRead: requests to two handlers, interleaved
// and sent back to back so that reads carry both, each reach their own
// handler (dispatch looks up the handler gathered last before the map).
func TestInterleavedHandlersInOneRead(t *testing.T) {
	a, b := pair(t, nil, nil)
	ctx := testCtx(t)
	const each = 2000
	var got [2]atomic.Int64
	done := make(chan struct{})
	var total atomic.Int64
	for i, name := range []string{"left", "right"} {
		must(t, b.Register(velo.FireHandler(name, func(c *velo.Context) {
			if string(c.Payload) != name {
				t.Errorf("handler %s got a request for %s", name, c.Payload)
			}
			got[i].Add(1)
			if total.Add(1) == 2*each {
				close(done)
			}
		})))
	}
	for range each {
		for _, name := range []string{"left", "right"} {
			if err := a.Send(ctx, b.InstanceID(), name, []byte(name)); err != nil {
				t.Fatal(err)
			}
		}
	}
	select {
	case <-done:
	case <-ctx.Done():
		t.Fatalf("handlers saw %d and %d of %d each", got[0].Load(), got[1].Load(), each)
	}
	if got[0].Load() != each || got[1].Load() != each {
		t.Fatalf("handlers saw %d and %d, want %d each", got[0].Load(), got[1].Load(), each)
	}
}
