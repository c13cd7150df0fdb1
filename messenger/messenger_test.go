package messenger_test

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"go.uber.org/goleak"

	"github.com/velo-go/velo"
	"github.com/velo-go/velo/ext"
	"github.com/velo-go/velo/messenger"
	"github.com/velo-go/velo/metrics"
	"github.com/velo-go/velo/transport/tcp"
)

// TestMain checks that no test leaves a goroutine behind: ordered lanes,
// transport readers and writers, and handlers must all be gone once every
// node of a test has shut down.
func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// failAfter bounds every wait in these tests. It is a failure detector, not
// a timing assumption: a healthy run never comes close to it.
const failAfter = 10 * time.Second

// newNode starts a node on loopback TCP and shuts it down when the test ends.
func newNode(t testing.TB, opts ...velo.Option) *velo.Node {
	t.Helper()
	tr, err := tcp.New()
	if err != nil {
		t.Fatal(err)
	}
	return newNodeOn(t, tr, opts...)
}

// newNodeOn is newNode over a transport the test made.
func newNodeOn(t testing.TB, tr ext.Transport, opts ...velo.Option) *velo.Node {
	t.Helper()
	n, err := velo.New(context.Background(), append([]velo.Option{velo.WithTransport(tr)}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		select {
		case <-n.Done():
			return // the test shut it down and checked the result
		default:
		}
		if err := shutdownWithin(n, 5*time.Second); err != nil {
			t.Errorf("shutdown of %s: %v", n.InstanceID(), err)
		}
	})
	return n
}

// pair starts a caller and a server. Only the caller registers the server
// by hand: the server learns the caller from the handshake, as in a real
// deployment where clients come and go.
func pair(t testing.TB, callerOpts, serverOpts []velo.Option) (caller, server *velo.Node) {
	t.Helper()
	caller = newNode(t, callerOpts...)
	server = newNode(t, serverOpts...)
	must(t, caller.RegisterPeer(server.PeerInfo()))
	return caller, server
}

func newMetrics(t testing.TB) *metrics.VeloMetrics {
	t.Helper()
	vm, err := metrics.Register(prometheus.NewRegistry())
	if err != nil {
		t.Fatal(err)
	}
	return vm
}

func must(t testing.TB, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

// testCtx is a context bounded by the failure detector.
func testCtx(t testing.TB) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), failAfter)
	t.Cleanup(cancel)
	return ctx
}

// gate is a channel a test closes once; closing again is harmless, so a
// cleanup can close it too (cleanups run before the nodes' shutdowns when
// registered after the nodes were made).
type gate struct {
	ch   chan struct{}
	once sync.Once
}

func newGate(t testing.TB) *gate {
	g := &gate{ch: make(chan struct{})}
	t.Cleanup(g.open)
	return g
}

func (g *gate) open() { g.once.Do(func() { close(g.ch) }) }

// wait blocks until the gate opens, or fails after failAfter.
func (g *gate) wait() error {
	select {
	case <-g.ch:
		return nil
	case <-time.After(failAfter):
		return errors.New("test gate never opened")
	}
}

// recv waits for a value on ch, failing the test after failAfter.
func recv[T any](t testing.TB, ch <-chan T, what string) T {
	t.Helper()
	select {
	case v := <-ch:
		return v
	case <-time.After(failAfter):
		t.Fatalf("timed out waiting for %s", what)
		panic("unreachable")
	}
}

// waitFor polls cond (a counter or gauge) until it holds, failing after failAfter.
func waitFor(t testing.TB, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(failAfter)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(2 * time.Millisecond)
	}
}

func remoteErr(t testing.TB, err error) *messenger.RemoteError {
	t.Helper()
	var re *messenger.RemoteError
	if !errors.As(err, &re) {
		t.Fatalf("want a *messenger.RemoteError, got %T: %v", err, err)
	}
	return re
}

type addReq struct {
	A, B int
}

type addResp struct {
	Sum int `json:"sum"`
}

// TestFourPatterns runs fire-and-forget, sync, unary and typed unary end to
// end over TCP.
func TestFourPatterns(t *testing.T) {
	a, b := pair(t, nil, nil)
	ctx := testCtx(t)

	hold := newGate(t)
	fired := make(chan []byte, 1)
	must(t, b.Register(velo.FireHandler("notify", func(c *velo.Context) {
		if c.ResponseType() != messenger.FireAndForget {
			t.Errorf("notify: response type %v", c.ResponseType())
		}
		p := append([]byte(nil), c.Payload...) // the payload is only valid during the call
		hold.wait()
		fired <- p
	})))
	var processed atomic.Bool
	must(t, b.Register(velo.SyncHandler("process", func(c *velo.Context) error {
		if string(c.Payload) == "bad" {
			return errors.New("job rejected: bad input")
		}
		processed.Store(true)
		return nil
	})))
	must(t, b.Register(velo.UnaryHandler("echo", func(c *velo.Context) ([]byte, error) {
		return append([]byte("echo:"), c.Payload...), nil
	})))
	must(t, b.Register(velo.TypedUnaryHandler("add", func(c *velo.Context, in addReq) (addResp, error) {
		if in.A < 0 {
			return addResp{}, fmt.Errorf("negative operand %d", in.A)
		}
		return addResp{Sum: in.A + in.B}, nil
	})))

	t.Run("fire-and-forget", func(t *testing.T) {
		// The handler is held: Send must come back without waiting for it,
		// once the transport has taken the frame.
		must(t, a.Send(ctx, b.InstanceID(), "notify", []byte("event-1")))
		select {
		case <-fired:
			t.Fatal("the handler finished while it was held")
		default:
		}
		hold.open()
		if got := recv(t, fired, "the fire-and-forget handler"); string(got) != "event-1" {
			t.Fatalf("handler saw %q", got)
		}
	})

	t.Run("sync", func(t *testing.T) {
		must(t, a.Sync(ctx, b.InstanceID(), "process", []byte("good")))
		if !processed.Load() {
			t.Fatal("Sync returned before the handler ran")
		}
		err := a.Sync(ctx, b.InstanceID(), "process", []byte("bad"))
		re := remoteErr(t, err)
		if re.Handler != "process" || re.Message != "job rejected: bad input" {
			t.Fatalf("remote error %+v", re)
		}
		if !strings.Contains(err.Error(), "process") || !strings.Contains(err.Error(), "job rejected") {
			t.Fatalf("error text %q names neither the handler nor the cause", err)
		}
	})

	t.Run("unary", func(t *testing.T) {
		got, err := a.Unary(ctx, b.InstanceID(), "echo", []byte("hi"))
		must(t, err)
		if string(got) != "echo:hi" {
			t.Fatalf("got %q", got)
		}
		got, err = a.Unary(ctx, b.InstanceID(), "echo", nil)
		must(t, err)
		if string(got) != "echo:" {
			t.Fatalf("empty payload: got %q", got)
		}
		// Over the 64 KiB coalescing threshold: the large-frame path both ways.
		big := make([]byte, 1<<20)
		rand.Read(big)
		got, err = a.Unary(ctx, b.InstanceID(), "echo", big)
		must(t, err)
		if !bytes.Equal(got, append([]byte("echo:"), big...)) {
			t.Fatal("1 MiB payload came back changed")
		}
	})

	t.Run("typed unary", func(t *testing.T) {
		out, err := velo.TypedUnary[addResp](ctx, a, b.InstanceID(), "add", addReq{A: 2, B: 3})
		must(t, err)
		if out.Sum != 5 {
			t.Fatalf("sum %d", out.Sum)
		}
		out, err = messenger.TypedUnary[addResp](ctx, a.Messenger(), b.InstanceID(), "add", addReq{A: 40, B: 2})
		must(t, err)
		if out.Sum != 42 {
			t.Fatalf("sum %d", out.Sum)
		}
		// The wire form is JSON both ways.
		raw, err := a.Unary(ctx, b.InstanceID(), "add", []byte(`{"A":1,"B":1}`))
		must(t, err)
		if string(raw) != `{"sum":2}` {
			t.Fatalf("raw answer %s", raw)
		}
		// The handler's error, and a request that is not JSON, come back as remote errors.
		_, err = velo.TypedUnary[addResp](ctx, a, b.InstanceID(), "add", addReq{A: -1})
		if re := remoteErr(t, err); re.Handler != "add" || !strings.Contains(re.Message, "negative operand -1") {
			t.Fatalf("remote error %+v", re)
		}
		_, err = a.Unary(ctx, b.InstanceID(), "add", []byte("not json"))
		if re := remoteErr(t, err); !strings.Contains(re.Message, "decode request") {
			t.Fatalf("remote error %+v", re)
		}
		// An answer that does not fit Resp fails on the caller's side.
		_, err = velo.TypedUnary[[]string](ctx, a, b.InstanceID(), "add", addReq{A: 1})
		var re *messenger.RemoteError
		if err == nil || errors.As(err, &re) || !strings.Contains(err.Error(), "decode answer") {
			t.Fatalf("want a local decode error, got %v", err)
		}
	})
}

// TestTimeoutGivesTheSlotBackAndDropsTheLateReply pins the timeout rules:
// the error matches both ErrRequestTimeout and context.DeadlineExceeded,
// the response slot is free at once, and a reply that comes after its
// caller gave up never reaches the next holder of the same slot.
func TestTimeoutGivesTheSlotBackAndDropsTheLateReply(t *testing.T) {
	am := newMetrics(t)
	a, b := pair(t, []velo.Option{velo.WithResponseSlots(1), velo.WithMetrics(am)}, nil)
	ctx := testCtx(t)

	slow, slowIn := newGate(t), make(chan struct{}, 1)
	must(t, b.Register(velo.UnaryHandler("slow", func(c *velo.Context) ([]byte, error) {
		slowIn <- struct{}{}
		slow.wait()
		return []byte("late answer"), nil
	})))
	must(t, b.Register(velo.UnaryHandler("fast", func(c *velo.Context) ([]byte, error) {
		return []byte("fast answer"), nil
	})))
	held, heldIn := newGate(t), make(chan struct{}, 1)
	must(t, b.Register(velo.UnaryHandler("held", func(c *velo.Context) ([]byte, error) {
		heldIn <- struct{}{}
		held.wait()
		return []byte("own answer"), nil
	})))
	// The handshake uses the one slot too: get it done first.
	_, err := a.Unary(ctx, b.InstanceID(), "fast", nil)
	must(t, err)

	short, cancel := context.WithTimeout(ctx, 50*time.Millisecond)
	defer cancel()
	start := time.Now()
	_, err = a.Unary(short, b.InstanceID(), "slow", nil)
	if !errors.Is(err, velo.ErrRequestTimeout) || !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("want ErrRequestTimeout matching context.DeadlineExceeded, got %v", err)
	}
	if el := time.Since(start); el > 5*time.Second {
		t.Fatalf("a 50 ms call took %v", el)
	}
	recv(t, slowIn, "the slow handler to start") // it did run, and is still blocked

	// One slot: this call can only go out if the timed-out call gave it back.
	got, err := a.Unary(ctx, b.InstanceID(), "fast", nil)
	must(t, err)
	if string(got) != "fast answer" {
		t.Fatalf("got %q", got)
	}

	// Hold the slot with a new call, then let the late reply arrive: it names
	// the same slot with an older generation and must be discarded.
	answer := make(chan []byte, 1)
	go func() {
		got, err := a.Unary(ctx, b.InstanceID(), "held", nil)
		if err != nil {
			t.Errorf("held call: %v", err)
		}
		answer <- got
	}()
	recv(t, heldIn, "the held handler to start")
	lateDropped := am.DispatchFailures.WithLabelValues("response", "late_or_unknown")
	slow.open()
	waitFor(t, "the late reply to be discarded", func() bool { return testutil.ToFloat64(lateDropped) == 1 })
	held.open()
	if got := recv(t, answer, "the held call"); string(got) != "own answer" {
		t.Fatalf("the slot's new holder got %q", got)
	}
}

// TestSlotWaitIsBoundedByTheDeadline: with every response slot taken, a call
// waits for one only until its deadline, and the wait is counted.
func TestSlotWaitIsBoundedByTheDeadline(t *testing.T) {
	am := newMetrics(t)
	a, b := pair(t, []velo.Option{velo.WithResponseSlots(1), velo.WithMetrics(am)}, nil)
	ctx := testCtx(t)
	hold, in := newGate(t), make(chan struct{}, 1)
	must(t, b.Register(velo.UnaryHandler("hold", func(c *velo.Context) ([]byte, error) {
		in <- struct{}{}
		return nil, hold.wait()
	})))
	done := make(chan error, 1)
	go func() {
		_, err := a.Unary(ctx, b.InstanceID(), "hold", nil)
		done <- err
	}()
	recv(t, in, "the handler to hold the only slot")
	short, cancel := context.WithTimeout(ctx, 50*time.Millisecond)
	defer cancel()
	_, err := a.Unary(short, b.InstanceID(), "hold", nil)
	if !errors.Is(err, velo.ErrRequestTimeout) {
		t.Fatalf("want ErrRequestTimeout while waiting for a slot, got %v", err)
	}
	if n := testutil.ToFloat64(am.ResponseSlotExhausted); n != 1 {
		t.Fatalf("slot exhaustion counted %v times", n)
	}
	// A cancel is not a timeout.
	cctx, ccancel := context.WithCancel(ctx)
	ccancel()
	if _, err := a.Unary(cctx, b.InstanceID(), "hold", nil); !errors.Is(err, context.Canceled) || errors.Is(err, velo.ErrRequestTimeout) {
		t.Fatalf("want context.Canceled, got %v", err)
	}
	hold.open()
	must(t, recv(t, done, "the holding call"))
}

// TestHandlerContext checks what a handler learns about its caller, and
// that it can call the caller back.
func TestHandlerContext(t *testing.T) {
	a, b := pair(t, nil, nil)
	ctx := testCtx(t)

	type seen struct {
		Worker   uint64
		Instance string
		Known    bool
		Headers  map[string]string
		Type     string
		Handler  string
	}
	must(t, b.Register(velo.UnaryHandler("whoami", func(c *velo.Context) ([]byte, error) {
		h, err := c.Headers()
		if err != nil {
			return nil, err
		}
		id, ok := c.SenderInstanceID()
		return json.Marshal(seen{uint64(c.SenderWorkerID()), id.String(), ok, h, c.ResponseType().String(), c.Handler})
	})))
	must(t, a.Register(velo.UnaryHandler("a-side", func(c *velo.Context) ([]byte, error) {
		return append([]byte("a answered "), c.Payload...), nil
	})))
	must(t, b.Register(velo.UnaryHandler("callback", func(c *velo.Context) ([]byte, error) {
		id, ok := c.SenderInstanceID()
		if !ok {
			return nil, errors.New("sender unknown after the handshake")
		}
		cctx, cancel := context.WithTimeout(context.Background(), failAfter)
		defer cancel()
		return c.Messenger().Unary(cctx, id, "a-side", c.Payload)
	})))

	headers := map[string]string{
		"trace-id": "4bf92f3577b34da6a3ce929d0e0e4736",
		"tenant":   "ünïcode ✓",
		"empty":    "",
		"big":      strings.Repeat("v", messenger.MaxHeaderValue),
	}
	raw, err := a.Unary(ctx, b.InstanceID(), "whoami", nil, velo.WithHeaders(headers))
	must(t, err)
	var s seen
	must(t, json.Unmarshal(raw, &s))
	if s.Worker != uint64(a.WorkerID()) {
		t.Errorf("SenderWorkerID %x, caller is %x", s.Worker, uint64(a.WorkerID()))
	}
	if !s.Known || s.Instance != a.InstanceID().String() {
		t.Errorf("SenderInstanceID %q known=%v, caller is %s", s.Instance, s.Known, a.InstanceID())
	}
	if len(s.Headers) != len(headers) {
		t.Errorf("headers: got %d, sent %d", len(s.Headers), len(headers))
	}
	for k, v := range headers {
		if s.Headers[k] != v {
			t.Errorf("header %q: got %q, sent %q", k, s.Headers[k], v)
		}
	}
	if s.Type != "unary" || s.Handler != "whoami" {
		t.Errorf("response type %q, handler %q", s.Type, s.Handler)
	}
	// No headers: an empty map, not an error.
	raw, err = a.Unary(ctx, b.InstanceID(), "whoami", nil)
	must(t, err)
	s = seen{}
	must(t, json.Unmarshal(raw, &s))
	if len(s.Headers) != 0 {
		t.Errorf("headers without WithHeaders: %v", s.Headers)
	}

	got, err := a.Unary(ctx, b.InstanceID(), "callback", []byte("back"))
	must(t, err)
	if string(got) != "a answered back" {
		t.Fatalf("callback got %q", got)
	}
}

// TestRegistrationRules: reserved names, duplicates and bad options fail at
// registration, and a failed registration leaves the first handler alone.
func TestRegistrationRules(t *testing.T) {
	a, b := pair(t, nil, nil)
	ctx := testCtx(t)
	ok := func(c *velo.Context) ([]byte, error) { return []byte("first"), nil }

	if err := b.Register(velo.UnaryHandler("_x", ok)); !errors.Is(err, messenger.ErrReservedName) {
		t.Errorf("_x: want ErrReservedName, got %v", err)
	}
	if err := b.Register(velo.UnaryHandler("_hello", ok)); !errors.Is(err, messenger.ErrReservedName) {
		t.Errorf("_hello: want ErrReservedName, got %v", err)
	}
	must(t, b.Register(velo.UnaryHandler("dup", ok)))
	second := velo.UnaryHandler("dup", func(c *velo.Context) ([]byte, error) { return []byte("second"), nil })
	if err := b.Register(second); !errors.Is(err, messenger.ErrDuplicateHandler) {
		t.Errorf("duplicate: want ErrDuplicateHandler, got %v", err)
	}
	for _, n := range []int{0, -1} {
		if err := b.Register(velo.UnaryHandler(fmt.Sprintf("mc%d", n), ok, velo.WithMaxConcurrent(n))); err == nil {
			t.Errorf("WithMaxConcurrent(%d) registered", n)
		}
	}
	if err := b.Register(velo.UnaryHandler("depth", ok, velo.WithOrderedConfig(velo.OrderedConfig{MaxQueueDepth: -1}))); err == nil {
		t.Error("a negative MaxQueueDepth registered")
	}
	if err := b.Register(velo.UnaryHandler("", ok)); err == nil {
		t.Error("an empty name registered")
	}
	if err := b.Register(velo.UnaryHandler(strings.Repeat("n", 1025), ok)); err == nil {
		t.Error("a 1025-byte name registered")
	}
	if err := b.Register(velo.UnaryHandler("nilfn", nil)); err == nil {
		t.Error("a handler without a function registered")
	}
	names := b.Handlers()
	slices.Sort(names)
	if !slices.Equal(names, []string{"dup"}) {
		t.Errorf("Handlers() = %v, want [dup]", names)
	}
	got, err := a.Unary(ctx, b.InstanceID(), "dup", nil)
	must(t, err)
	if string(got) != "first" {
		t.Fatalf("the duplicate replaced the first handler: got %q", got)
	}
}

// TestHeaderLimits: the caller refuses headers over the limits with a clear
// error, and nothing reaches the remote.
func TestHeaderLimits(t *testing.T) {
	a, b := pair(t, nil, nil)
	ctx := testCtx(t)
	var calls atomic.Int64
	must(t, b.Register(velo.SyncHandler("h", func(c *velo.Context) error {
		calls.Add(1)
		_, err := c.Headers()
		return err
	})))

	tooLong := map[string]string{"k": strings.Repeat("x", messenger.MaxHeaderValue+1)}
	err := a.Sync(ctx, b.InstanceID(), "h", nil, velo.WithHeaders(tooLong))
	if err == nil || !strings.Contains(err.Error(), "1025 bytes exceeds 1024") {
		t.Errorf("value of 1025 bytes: want a clear error, got %v", err)
	}
	tooMany := map[string]string{}
	for i := range 20 {
		tooMany[fmt.Sprintf("key-%02d", i)] = strings.Repeat("y", 1000)
	}
	err = a.Sync(ctx, b.InstanceID(), "h", nil, velo.WithHeaders(tooMany))
	if err == nil || !strings.Contains(err.Error(), "exceed 16384") {
		t.Errorf("20 KB of headers: want a clear error, got %v", err)
	}
	var re *messenger.RemoteError
	if errors.As(err, &re) {
		t.Errorf("the limit was enforced by the remote, not the caller: %v", err)
	}

	// Just under both limits goes through: 15 values of 1 KiB, about 15.1 KiB encoded.
	atLimit := map[string]string{}
	for i := range 15 {
		atLimit[fmt.Sprintf("k%02d", i)] = strings.Repeat("z", messenger.MaxHeaderValue)
	}
	enc, err := messenger.EncodeHeaders(atLimit)
	must(t, err)
	if len(enc) < 15000 || len(enc) > messenger.MaxEncodedHeaders {
		t.Fatalf("test set-up: %d encoded bytes", len(enc))
	}
	must(t, a.Sync(ctx, b.InstanceID(), "h", nil, velo.WithHeaders(atLimit)))
	// Requests on one connection arrive in order: one handler call means
	// the refused requests never left the caller.
	if n := calls.Load(); n != 1 {
		t.Fatalf("handler ran %d times, want 1", n)
	}
}

// TestUnknownHandler: the remote answers a request for a name it does not
// serve with an error that names it.
func TestUnknownHandler(t *testing.T) {
	bm := newMetrics(t)
	a, b := pair(t, nil, []velo.Option{velo.WithMetrics(bm)})
	ctx := testCtx(t)
	for _, call := range []func() error{
		func() error { _, err := a.Unary(ctx, b.InstanceID(), "no-such-rpc", nil); return err },
		func() error { return a.Sync(ctx, b.InstanceID(), "no-such-rpc", nil) },
	} {
		err := call()
		re := remoteErr(t, err)
		if re.Handler != "no-such-rpc" || !strings.Contains(re.Message, `"no-such-rpc"`) {
			t.Fatalf("remote error %+v", re)
		}
	}
	if n := testutil.ToFloat64(bm.DispatchFailures.WithLabelValues("dispatch", "unknown_handler")); n != 2 {
		t.Fatalf("unknown_handler counted %v times, want 2", n)
	}
}

// TestHandshakeOnce: concurrent first calls to a new peer share one
// handshake, and later calls make none.
func TestHandshakeOnce(t *testing.T) {
	a, b := pair(t, nil, nil)
	ctx := testCtx(t)
	must(t, b.Register(velo.UnaryHandler("ping", func(c *velo.Context) ([]byte, error) { return []byte("pong"), nil })))

	const n = 32
	var wg sync.WaitGroup
	start := make(chan struct{})
	for range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			if _, err := a.Unary(ctx, b.InstanceID(), "ping", nil); err != nil {
				t.Error(err)
			}
		}()
	}
	close(start)
	wg.Wait()
	if h := a.Messenger().Handshakes(); h != 1 {
		t.Fatalf("%d concurrent first calls made %d handshakes, want 1", n, h)
	}
	for range 10 {
		_, err := a.Unary(ctx, b.InstanceID(), "ping", nil)
		must(t, err)
	}
	must(t, a.Send(ctx, b.InstanceID(), "ping", nil))
	must(t, a.Sync(ctx, b.InstanceID(), "ping", nil))
	if h := a.Messenger().Handshakes(); h != 1 {
		t.Fatalf("later calls made handshakes: %d", h)
	}
	// The server learned the caller from the hello and never had to greet it.
	if h := b.Messenger().Handshakes(); h != 0 {
		t.Fatalf("the server made %d handshakes", h)
	}
}

// TestWaitForHandler: it returns for a handler registered on the remote
// after the handshake, and asks nothing for a handler the handshake listed.
func TestWaitForHandler(t *testing.T) {
	bm := newMetrics(t)
	a, b := pair(t, nil, []velo.Option{velo.WithMetrics(bm)})
	ctx := testCtx(t)
	must(t, b.Register(velo.UnaryHandler("early", func(c *velo.Context) ([]byte, error) { return []byte("early"), nil })))
	_, err := a.Unary(ctx, b.InstanceID(), "early", nil) // the handshake lists "early" only
	must(t, err)

	// Nothing goes to the server for a handler it already listed.
	inbound := testutil.ToFloat64(bm.InboundDequeued)
	must(t, a.WaitForHandler(ctx, b.InstanceID(), "early"))
	if got := testutil.ToFloat64(bm.InboundDequeued); got != inbound {
		t.Fatalf("WaitForHandler for a known handler sent %v requests", got-inbound)
	}
	if a.Messenger().Handshakes() != 1 {
		t.Fatalf("handshakes %d", a.Messenger().Handshakes())
	}

	waiting := make(chan struct{})
	registered := make(chan struct{})
	go func() {
		<-waiting
		if err := b.Register(velo.UnaryHandler("late", func(c *velo.Context) ([]byte, error) { return []byte("late"), nil })); err != nil {
			t.Error(err)
		}
		close(registered)
	}()
	done := make(chan error, 1)
	go func() {
		close(waiting)
		done <- a.WaitForHandler(ctx, b.InstanceID(), "late")
	}()
	must(t, recv(t, done, "WaitForHandler"))
	if testutil.ToFloat64(bm.InboundDequeued) == inbound {
		t.Fatal("WaitForHandler found a handler registered after the handshake without asking the peer")
	}
	select {
	case <-registered:
	default:
		t.Fatal("WaitForHandler returned before the handler was registered")
	}
	got, err := a.Unary(ctx, b.InstanceID(), "late", nil)
	must(t, err)
	if string(got) != "late" {
		t.Fatalf("got %q", got)
	}

	// A handler that never comes: WaitForHandler ends with its context.
	short, cancel := context.WithTimeout(ctx, 50*time.Millisecond)
	defer cancel()
	if err := a.WaitForHandler(short, b.InstanceID(), "never"); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("want a timeout, got %v", err)
	}
}

// TestUnknownPeer: a call to an instance nobody registered fails at once.
func TestUnknownPeer(t *testing.T) {
	a := newNode(t)
	other := newNode(t)
	_, err := a.Unary(testCtx(t), other.InstanceID(), "x", nil)
	if !errors.Is(err, velo.ErrPeerNotRegistered) {
		t.Fatalf("want ErrPeerNotRegistered, got %v", err)
	}
	if err := a.RegisterPeer(a.PeerInfo()); err == nil {
		t.Fatal("a node registered itself as its own peer")
	}
}

// seq encodes a sequence number as a payload.
func seq(i int) []byte { return binary.BigEndian.AppendUint32(nil, uint32(i)) }

func unseq(p []byte) int { return int(binary.BigEndian.Uint32(p)) }

// shutdownWithin shuts n down, draining for at most d.
func shutdownWithin(n interface{ Shutdown(context.Context) error }, d time.Duration) error {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	return n.Shutdown(ctx)
}
