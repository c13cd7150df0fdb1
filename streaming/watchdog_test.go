package streaming

import (
	"bytes"
	"context"
	"errors"
	"io"
	"log/slog"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"
)

// testWindow is the heartbeat interval of these tests: short, so that a
// detection takes a fraction of a second.
const testWindow = 50 * time.Millisecond

// watchdogSlack is how late past detectionMultiplier windows a detection
// may land on a shared 2-core machine under the race detector.
const watchdogSlack = 150 * time.Millisecond

// syncBuffer is a log sink safe for the reader goroutines.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.String()
}

func hbNodes(t *testing.T, log io.Writer) (producer, consumer *remoteNode) {
	return hbNodesEvery(t, log, testWindow)
}

// hbNodesEvery is hbNodes with a heartbeat window of its own.
func hbNodesEvery(t *testing.T, log io.Writer, window time.Duration) (producer, consumer *remoteNode) {
	producer = newRemoteNode(t)
	opts := []ManagerOption{WithHeartbeatInterval(window)}
	if log != nil {
		opts = append(opts, WithStreamLogger(slog.New(slog.NewTextHandler(log, nil))))
	}
	consumer = newRemoteNode(t, opts...)
	if err := producer.msg.RegisterPeer(consumer.msg.PeerInfo()); err != nil {
		t.Fatal(err)
	}
	return producer, consumer
}

// checkDetection asserts that the watchdog ended a stream between 2 and
// detectionMultiplier windows (plus slack) after its last frame.
func checkDetection(t *testing.T, a *Anchor[[]byte], last time.Time) time.Duration {
	t.Helper()
	_, err := nextItemWithin(t, a, 5*time.Second)
	took := time.Since(last)
	if !errors.Is(err, ErrSenderDropped) {
		t.Fatalf("Next after %v of silence = %v, want ErrSenderDropped", took, err)
	}
	if lo, hi := 2*testWindow, detectionMultiplier*testWindow+watchdogSlack; took < lo || took > hi {
		t.Fatalf("dropped %v after the last frame, want within [%v, %v]", took, lo, hi)
	}
	return took
}

// TestWatchdogStoppedProducer: a producer whose node stops beating (its
// heartbeater paused, the connection open) is ended on the consumer with
// ErrSenderDropped three windows after its last frame, not before two;
// the consumer counts one firing and logs one warning with the stream's
// depths, and the producer hears of it as a cancel.
func TestWatchdogStoppedProducer(t *testing.T) {
	var log syncBuffer
	producer, consumer := hbNodes(t, &log)
	a, err := CreateAnchor[[]byte](consumer.sm)
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	s := attachRemoteT[[]byte](t, producer, a.Handle())
	producer.sm.remote.tcp.PauseHeartbeats(true)
	if err := s.Send(context.Background(), []byte("last")); err != nil {
		t.Fatal(err)
	}
	if v, err := nextItemWithin(t, a, 5*time.Second); err != nil || string(v) != "last" {
		t.Fatalf("Next = %q, %v", v, err)
	}
	took := checkDetection(t, a, time.Now())
	t.Logf("detected %v after the last frame (window %v)", took, testWindow)
	if n := consumer.sm.watchdogFirings(); n != 1 {
		t.Fatalf("WatchdogFirings = %d, want 1", n)
	}
	if n := producer.sm.watchdogFirings(); n != 0 {
		t.Fatalf("producer's WatchdogFirings = %d, want 0", n)
	}
	if lines := strings.Count(log.String(), "watchdog fired"); lines != 1 {
		t.Fatalf("%d watchdog warnings, want 1:\n%s", lines, log.String())
	}
	for _, want := range []string{"level=WARN", "anchor_inlet_len=0", "anchor_inlet_cap=256", "heartbeat_deadline_ms=50", "detection_multiplier=3"} {
		if !strings.Contains(log.String(), want) {
			t.Fatalf("warning lacks %q:\n%s", want, log.String())
		}
	}
	select {
	case <-s.Cancelled():
	case <-time.After(5 * time.Second):
		t.Fatal("the producer never heard that its stream ended")
	}
}

// TestWatchdogSilentConnection: a raw connection that sent its preamble
// and one item, then nothing, while staying open: ErrSenderDropped within
// the watchdog bound.
func TestWatchdogSilentConnection(t *testing.T) {
	consumer := newRemoteNode(t, WithHeartbeatInterval(testWindow), WithStreamLogger(slog.New(slog.DiscardHandler)))
	raw := newMessenger(t)
	connect(t, raw, consumer.msg)
	a, err := CreateAnchor[[]byte](consumer.sm)
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	dialStream(t, raw, consumer, a.Handle())
	if v, err := nextItemWithin(t, a, 5*time.Second); err != nil || string(v) != "a" {
		t.Fatalf("Next = %q, %v", v, err)
	}
	checkDetection(t, a, time.Now())
	if n := consumer.sm.watchdogFirings(); n != 1 {
		t.Fatalf("WatchdogFirings = %d, want 1", n)
	}
	if got := consumer.sm.activeAnchors(); got != 0 {
		t.Fatalf("ActiveAnchors = %d after the watchdog ended the stream", got)
	}
}

// TestHeartbeatKeepsIdleStreamAlive: an idle producer whose heartbeats
// flow is not dropped over ten windows, and Next never returns a
// heartbeat: the next thing it returns is the next item.
func TestHeartbeatKeepsIdleStreamAlive(t *testing.T) {
	// A window three times testWindow, as in TestHeartbeatGoroutinePerManager:
	// this test asserts that a live stream is not dropped, and with 50 ms a
	// loaded 2-core machine once went three windows without running the
	// heartbeater, so the watchdog rightly fired. Detection itself is
	// tested at testWindow by the tests above.
	const window = 3 * testWindow
	producer, consumer := hbNodesEvery(t, nil, window)
	a, err := CreateAnchor[[]byte](consumer.sm)
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	s := attachRemoteT[[]byte](t, producer, a.Handle())
	ctx := context.Background()
	if err := s.Send(ctx, []byte("first")); err != nil {
		t.Fatal(err)
	}
	if v, err := nextItemWithin(t, a, 5*time.Second); err != nil || string(v) != "first" {
		t.Fatalf("Next = %q, %v", v, err)
	}
	beats := producer.sm.remote.tcp.Heartbeats()
	if v, err := nextItemWithin(t, a, 10*window); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("idle stream over 10 windows: Next = %q, %v; want nothing", v, err)
	}
	if got := producer.sm.remote.tcp.Heartbeats() - beats; got < 5 {
		t.Fatalf("%d heartbeats over 10 windows, want about 10", got)
	}
	if n := consumer.sm.watchdogFirings(); n != 0 {
		t.Fatalf("WatchdogFirings = %d on a live stream", n)
	}
	if err := s.Send(ctx, []byte("second")); err != nil {
		t.Fatal(err)
	}
	if v, err := a.NextBytes(ctx); err != nil || string(v) != "second" {
		t.Fatalf("NextBytes after the heartbeats = %q, %v", v, err)
	}
	s.Finalize()
	if _, err := nextItemWithin(t, a, 5*time.Second); err != io.EOF {
		t.Fatalf("after Finalize: %v, want io.EOF", err)
	}
}

// heartbeaters counts the heartbeat goroutines running in the process.
func heartbeaters() int {
	buf := make([]byte, 1<<20)
	for {
		n := runtime.Stack(buf, true)
		if n < len(buf) {
			return strings.Count(string(buf[:n]), "framepath.(*heartbeater).run(")
		}
		buf = make([]byte, 2*len(buf))
	}
}

// waitHeartbeaters waits (a second at most) until n heartbeat goroutines
// run, and returns the count: a goroutine not yet started shows no frame.
func waitHeartbeaters(n int) int {
	deadline := time.Now().Add(time.Second)
	for {
		got := heartbeaters()
		if got == n || time.Now().After(deadline) {
			return got
		}
		time.Sleep(time.Millisecond)
	}
}

// TestHeartbeatGoroutinePerManager: one heartbeat goroutine per Manager,
// whatever its stream count: 100 remote streams add none, and each
// stream costs its three goroutines, no more. A same-worker sender is not
// beaten. Close stops the heartbeater.
func TestHeartbeatGoroutinePerManager(t *testing.T) {
	// A window three times testWindow: with 100 streams on a loaded
	// 2-core machine, 150 ms without a beat happened, and the watchdog
	// rightly ended a stream. This test counts goroutines, not detection.
	const window = 3 * testWindow
	producer, consumer := hbNodesEvery(t, nil, window)
	base := waitHeartbeaters(2)
	if base < 2 {
		t.Fatalf("%d heartbeat goroutines for two Managers, want 2", base)
	}
	ctx := context.Background()
	const n = 100
	var g0 int // after the first stream, which sets up the messenger's connections and workers
	senders := make([]*Sender[[]byte], 0, n)
	anchors := make([]*Anchor[[]byte], 0, n)
	for i := range n {
		a, err := CreateAnchor[[]byte](consumer.sm)
		if err != nil {
			t.Fatal(err)
		}
		s, err := AttachAnchor[[]byte](ctx, producer.sm, a.Handle())
		if err != nil {
			t.Fatal(err)
		}
		anchors, senders = append(anchors, a), append(senders, s)
		if i == 0 {
			time.Sleep(window) // the first attach's handler workers park
			g0 = runtime.NumGoroutine()
		}
	}
	// A same-worker stream on the producer's node: no heartbeats.
	la, err := CreateAnchor[[]byte](producer.sm)
	if err != nil {
		t.Fatal(err)
	}
	defer la.Close()
	ls, err := AttachAnchor[[]byte](ctx, producer.sm, la.Handle())
	if err != nil {
		t.Fatal(err)
	}
	defer ls.Close()
	// Let heartbeats flow for a few windows; no stream may end meanwhile.
	if _, err := nextItemWithin(t, anchors[0], 3*window); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("stream 0: %v", err)
	}
	for i := 10; i < n; i += 10 {
		if _, err := nextItemWithin(t, anchors[i], time.Millisecond); !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("stream %d: %v", i, err)
		}
	}
	if got := heartbeaters(); got != base {
		t.Fatalf("%d heartbeat goroutines with %d remote streams, want %d (one per Manager)", got, n, base)
	}
	if got, want := runtime.NumGoroutine(), g0+3*(n-1); got > want+8 {
		t.Fatalf("%d goroutines with %d remote streams, want about %d (three per stream)", got, n, want)
	}
	path := producer.sm.remote.tcp
	beaten := path.Beaten()
	if beaten != n {
		t.Fatalf("the heartbeater beats %d senders, want the %d remote ones", beaten, n)
	}
	if path.Heartbeats() < n {
		t.Fatalf("%d heartbeats for %d idle streams over several windows", path.Heartbeats(), n)
	}
	if f := consumer.sm.watchdogFirings(); f != 0 {
		t.Fatalf("WatchdogFirings = %d with heartbeats flowing", f)
	}
	for i, s := range senders {
		s.Finalize()
		if _, err := nextItemWithin(t, anchors[i], 5*time.Second); err != io.EOF {
			t.Fatalf("stream %d: %v", i, err)
		}
		anchors[i].Close()
	}
	// A finished sender leaves the heartbeater.
	deadline := time.Now().Add(5 * time.Second)
	for {
		beaten = path.Beaten()
		if beaten == 0 || time.Now().After(deadline) {
			break
		}
		time.Sleep(time.Millisecond)
	}
	if beaten != 0 {
		t.Fatalf("%d senders left with the heartbeater after every stream ended", beaten)
	}
	producer.sm.Close()
	if got := waitHeartbeaters(base - 1); got != base-1 {
		t.Fatalf("%d heartbeat goroutines after one Manager closed, want %d", got, base-1)
	}
}
