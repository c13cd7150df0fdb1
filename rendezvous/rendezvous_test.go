package rendezvous_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"runtime"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/goleak"

	"github.com/velo-go/velo"
	"github.com/velo-go/velo/ext"
	"github.com/velo-go/velo/internal/msgrx"
	"github.com/velo-go/velo/internal/msgwire"
	"github.com/velo-go/velo/messenger"
	"github.com/velo-go/velo/metrics"
	"github.com/velo-go/velo/rendezvous"
	"github.com/velo-go/velo/transport/tcp"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func newNode(t testing.TB, opts ...velo.Option) (*velo.Node, *prometheus.Registry) {
	t.Helper()
	tr, err := tcp.New()
	if err != nil {
		t.Fatal(err)
	}
	return newNodeOn(t, tr, opts...)
}

// newNodeOn is newNode on a transport of the test's.
func newNodeOn(t testing.TB, tr ext.Transport, opts ...velo.Option) (*velo.Node, *prometheus.Registry) {
	t.Helper()
	reg := prometheus.NewRegistry()
	met, err := metrics.Register(reg)
	if err != nil {
		t.Fatal(err)
	}
	opts = append([]velo.Option{velo.WithTransport(tr), velo.WithMetrics(met)}, opts...)
	n, err := velo.New(context.Background(), opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		n.Shutdown(ctx)
	})
	return n, reg
}

// pair is a caller registered with a server.
func pair(t *testing.T, serverOpts ...velo.Option) (caller, server *velo.Node, cm, sm *prometheus.Registry) {
	caller, cm = newNode(t)
	server, sm = newNode(t, serverOpts...)
	if err := caller.RegisterPeer(server.PeerInfo()); err != nil {
		t.Fatal(err)
	}
	return caller, server, cm, sm
}

// waitFor polls cond until it holds, for at most 5 s.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func pattern(n int) []byte {
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(i*7 + i>>9)
	}
	return b
}

func registered(reg *prometheus.Registry) float64 {
	return valueOf(reg, "velo_rendezvous_operations_total", map[string]string{"operation": "register", "outcome": "success"})
}

// TestIdenticalBytesAcrossThreshold: the handler sees the caller's bytes
// whether they went inline or staged, and only payloads above 256 KiB are
// staged.
func TestIdenticalBytesAcrossThreshold(t *testing.T) {
	caller, server, cm, _ := pair(t)
	var got atomic.Pointer[[]byte]
	if err := server.Register(velo.UnaryHandler("echo-len", func(c *velo.Context) ([]byte, error) {
		b := bytes.Clone(c.Payload)
		got.Store(&b)
		return []byte(fmt.Sprint(len(c.Payload))), nil
	})); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		n      int
		staged bool
	}{{255 << 10, false}, {256 << 10, false}, {256<<10 + 1, true}, {2 << 20, true}, {16 << 20, true}} {
		before := registered(cm)
		want := pattern(tc.n)
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		resp, err := caller.Unary(ctx, server.InstanceID(), "echo-len", want)
		cancel()
		if err != nil {
			t.Fatalf("%d bytes: %v", tc.n, err)
		}
		if string(resp) != fmt.Sprint(tc.n) || !bytes.Equal(*got.Load(), want) {
			t.Fatalf("%d bytes: the handler saw different bytes", tc.n)
		}
		if staged := registered(cm) > before; staged != tc.staged {
			t.Fatalf("%d bytes: staged %v, want %v", tc.n, staged, tc.staged)
		}
	}
	// Every staged payload was released: the caller holds nothing.
	waitFor(t, "the caller's staged slots to be freed", func() bool { b, n := caller.Rendezvous.HeldBytes(); return b == 0 && n == 0 })
}

// TestStagingHeadersAreNeverForwarded: a handler sees the caller's own
// headers without _rv or _rv_budget_ms, and passing them on carries
// neither; a caller that writes an _rv header of its own gets it dropped.
func TestStagingHeadersAreNeverForwarded(t *testing.T) {
	a, b, _, _ := pair(t)
	c, _ := newNode(t)
	if err := b.RegisterPeer(c.PeerInfo()); err != nil {
		t.Fatal(err)
	}
	seen := make(chan map[string]string, 4)
	if err := c.Register(velo.UnaryHandler("sink", func(ctx *velo.Context) ([]byte, error) {
		h, err := ctx.Headers()
		seen <- h
		return nil, err
	})); err != nil {
		t.Fatal(err)
	}
	if err := b.Register(velo.UnaryHandler("fwd", func(ctx *velo.Context) ([]byte, error) {
		h, err := ctx.Headers()
		if err != nil {
			return nil, err
		}
		seen <- h
		cctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		return ctx.Messenger().Unary(cctx, c.InstanceID(), "sink", []byte("small"), messenger.WithHeaders(h))
	})); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := a.Unary(ctx, b.InstanceID(), "fwd", pattern(1<<20), velo.WithHeaders(map[string]string{"trace": "t1"})); err != nil {
		t.Fatal(err)
	}
	for _, who := range []string{"fwd", "sink"} {
		h := <-seen
		if h["trace"] != "t1" {
			t.Fatalf("%s lost the caller's header: %v", who, h)
		}
		for _, k := range []string{msgwire.StagedHandleHeader, msgwire.StagedBudgetHeader} {
			if _, ok := h[k]; ok {
				t.Fatalf("%s saw %s: %v", who, k, h)
			}
		}
	}
	// An _rv written by a caller on an eager send never reaches the wire.
	if _, err := b.Unary(ctx, c.InstanceID(), "sink", []byte("x"), velo.WithHeaders(map[string]string{msgwire.StagedHandleHeader: "1", "k": "v"})); err != nil {
		t.Fatal(err)
	}
	if h := <-seen; h["k"] != "v" || h[msgwire.StagedHandleHeader] != "" {
		t.Fatalf("a caller's _rv went out: %v", h)
	}
}

// TestCallerTimeoutStopsTheFetch: the caller's deadline travels with the
// handle and bounds the receiver's fetch; when it runs out the receiver
// drops the request unanswered, the handler never runs, and the owner's
// time-to-live frees the payload nobody fetched.
func TestCallerTimeoutStopsTheFetch(t *testing.T) {
	caller, server, _, sm := pair(t)
	var ran atomic.Int32
	if err := server.Register(velo.UnaryHandler("h", func(*velo.Context) ([]byte, error) { ran.Add(1); return nil, nil })); err != nil {
		t.Fatal(err)
	}
	// Handshake first, so the budget is spent on the fetch alone.
	if _, err := caller.Unary(context.Background(), server.InstanceID(), "h", nil); err != nil {
		t.Fatal(err)
	}
	ran.Store(0)
	hold := make(chan struct{})
	rendezvous.SetAcquireHook(caller.Rendezvous, func() { <-hold })
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	_, err := caller.Unary(ctx, server.InstanceID(), "h", pattern(1<<20))
	if !errors.Is(err, velo.ErrRequestTimeout) {
		t.Fatalf("err = %v, want a timeout", err)
	}
	waitFor(t, "the receiver to drop the fetch", func() bool {
		return valueOf(sm, "velo_messenger_dispatch_failures_total", map[string]string{"stage": "dispatch", "reason": "staged_fetch_budget"}) == 1
	})
	close(hold)
	rendezvous.SetAcquireHook(caller.Rendezvous, nil)
	// The owner's time-to-live (the caller's deadline) frees the payload.
	waitFor(t, "the TTL to free the payload", func() bool { b, n := caller.Rendezvous.HeldBytes(); return b == 0 && n == 0 })
	waitFor(t, "the sweep to stop", func() bool { return !rendezvous.Sweeping(caller.Rendezvous) })
	if ran.Load() != 0 {
		t.Fatal("the handler ran for a request whose caller had given up")
	}
}

// TestTTLFreesAnUnfetchedPayload: a slot with a time-to-live goes away on
// its own, and the sweep exists only while something has a deadline.
func TestTTLFreesAnUnfetchedPayload(t *testing.T) {
	n, _ := newNode(t)
	if rendezvous.Sweeping(n.Rendezvous) {
		t.Fatal("a sweep runs with nothing staged")
	}
	keep := n.Rendezvous.RegisterData(pattern(1000))
	if rendezvous.Sweeping(n.Rendezvous) {
		t.Fatal("a sweep runs for a slot without a deadline")
	}
	n.Rendezvous.RegisterDataTTL(pattern(4<<20), 50*time.Millisecond)
	if !rendezvous.Sweeping(n.Rendezvous) {
		t.Fatal("no sweep for a slot with a TTL")
	}
	waitFor(t, "the TTL", func() bool { b, _ := n.Rendezvous.HeldBytes(); return b == 1000 })
	waitFor(t, "the sweep to stop", func() bool { return !rendezvous.Sweeping(n.Rendezvous) })
	if md, err := n.Rendezvous.Metadata(context.Background(), keep); err != nil || md.TotalLen != 1000 {
		t.Fatalf("the slot without a TTL: %+v %v", md, err)
	}
}

// TestPayloadMaxRefusesBeforeAllocating: a stated size over the limit is
// refused before a buffer of that size exists; the caller's error names
// both sizes, the handler never runs, the owner frees its copy, and other
// calls go on.
func TestPayloadMaxRefusesBeforeAllocating(t *testing.T) {
	caller, server, _, _ := pair(t, velo.WithStagedPayloadMax(1<<20))
	var ran atomic.Int32
	if err := server.Register(velo.UnaryHandler("h", func(c *velo.Context) ([]byte, error) {
		ran.Add(1)
		return []byte(fmt.Sprint(len(c.Payload))), nil
	})); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	// A buffer given back by an earlier test's call (spent.go) may serve
	// the accepted payload: counted with the allocated ones.
	buffers := func() int64 { return rendezvous.FetchAllocs() + rendezvous.SpentTaken() }
	allocs := buffers()
	_, err := caller.Unary(ctx, server.InstanceID(), "h", pattern(2<<20))
	if err == nil || !strings.Contains(err.Error(), "2097152") || !strings.Contains(err.Error(), "1048576") {
		t.Fatalf("err = %v, want one naming 2097152 and 1048576", err)
	}
	if got := buffers(); got != allocs {
		t.Fatalf("%d buffers allocated for a refused payload", got-allocs)
	}
	if ran.Load() != 0 {
		t.Fatal("the handler ran")
	}
	waitFor(t, "the owner to free the refused payload", func() bool { b, _ := caller.Rendezvous.HeldBytes(); return b == 0 })
	resp, err := caller.Unary(ctx, server.InstanceID(), "h", pattern(1<<20))
	if err != nil || string(resp) != fmt.Sprint(1<<20) {
		t.Fatalf("a payload at the limit: %q %v", resp, err)
	}
	if got := buffers(); got != allocs+1 {
		t.Fatalf("%d buffers for one accepted payload", got-allocs)
	}
}

// TestHandleAPI: metadata, ref, get, get-into, detach and release between
// two nodes; the owner's memory returns to its baseline after the last
// release.
func TestHandleAPI(t *testing.T) {
	consumer, owner, _, _ := pair(t)
	if err := owner.RegisterPeer(consumer.PeerInfo()); err != nil {
		t.Fatal(err)
	}
	if err := msgrx.Handshake(consumer.Messenger(), context.Background(), owner.InstanceID()); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	runtime.GC()
	var base runtime.MemStats
	runtime.ReadMemStats(&base)

	const size = 16 << 20
	h := owner.Rendezvous.RegisterData(pattern(size))
	if h.Owner() != owner.WorkerID() || h.LocalID() == 0 {
		t.Fatalf("handle %+v", h)
	}
	md, err := consumer.Rendezvous.Metadata(ctx, h)
	if err != nil || md.TotalLen != size || md.Refcount != 1 {
		t.Fatalf("metadata %+v %v", md, err)
	}
	if err := consumer.Rendezvous.Ref(ctx, h); err != nil {
		t.Fatal(err)
	}
	direct := rendezvous.DirectChunks()
	got, lease1, err := consumer.Rendezvous.Get(ctx, h)
	if err != nil || !bytes.Equal(got, pattern(size)) {
		t.Fatalf("get: %v", err)
	}
	// Over TCP every chunk is read from the socket straight into its place
	// (ext.TransportAdapter.PayloadInto), not copied out of a read buffer.
	if d, want := rendezvous.DirectChunks()-direct, int64(size/rendezvous.ChunkSize); d != want {
		t.Fatalf("%d of %d chunks were read straight into the buffer", d, want)
	}
	got = nil
	if err := consumer.Rendezvous.Detach(ctx, h, lease1); err != nil {
		t.Fatal(err)
	}
	dst := make([]byte, size+10)
	direct = rendezvous.DirectChunks()
	n, lease2, err := consumer.Rendezvous.GetInto(ctx, h, dst)
	if err != nil || n != size || !bytes.Equal(dst[:n], pattern(size)) {
		t.Fatalf("get into: %d %v", n, err)
	}
	if d := rendezvous.DirectChunks() - direct; d != int64(size/rendezvous.ChunkSize) {
		t.Fatalf("get into: %d chunks read straight into the caller's buffer", d)
	}
	dst = nil
	if _, _, err := consumer.Rendezvous.GetInto(ctx, h, make([]byte, 10)); err == nil {
		t.Fatal("a 16 MiB payload fit 10 bytes")
	}
	if err := consumer.Rendezvous.Release(ctx, h, lease2); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the refcount to drop", func() bool {
		md, err := consumer.Rendezvous.Metadata(ctx, h)
		return err == nil && md.Refcount == 1
	})
	_, lease3, err := consumer.Rendezvous.Get(ctx, h)
	if err != nil {
		t.Fatal(err)
	}
	if err := consumer.Rendezvous.Release(ctx, h, lease3); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the owner to free the slot", func() bool { b, n := owner.Rendezvous.HeldBytes(); return b == 0 && n == 0 })
	if _, err := consumer.Rendezvous.Metadata(ctx, h); err == nil {
		t.Fatal("a freed handle still answers")
	}
	runtime.GC()
	var after runtime.MemStats
	runtime.ReadMemStats(&after)
	if grown := int64(after.HeapAlloc) - int64(base.HeapAlloc); grown > size/2 {
		t.Fatalf("the heap grew by %d bytes after the release", grown)
	}
}

// TestDrainStillServesPulls: a draining owner answers the acquire and pulls
// of a payload it staged, and refuses _rv_metadata and _rv_ref, which start
// new consumers.
func TestDrainStillServesPulls(t *testing.T) {
	consumer, owner, _, _ := pair(t)
	if err := msgrx.Handshake(consumer.Messenger(), context.Background(), owner.InstanceID()); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	h := owner.Rendezvous.RegisterData(pattern(2 << 20))
	owner.BeginDrain()
	got, lease, err := consumer.Rendezvous.Get(ctx, h)
	if err != nil || !bytes.Equal(got, pattern(2<<20)) {
		t.Fatalf("get during the drain: %v", err)
	}
	if err := consumer.Rendezvous.Release(ctx, h, lease); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the release", func() bool { b, _ := owner.Rendezvous.HeldBytes(); return b == 0 })
	h2 := owner.Rendezvous.RegisterData([]byte("x"))
	if _, err := consumer.Rendezvous.Metadata(ctx, h2); !errors.Is(err, velo.ErrShuttingDown) {
		t.Fatalf("metadata during the drain: %v", err)
	}
	if err := consumer.Rendezvous.Ref(ctx, h2); !errors.Is(err, velo.ErrShuttingDown) {
		t.Fatalf("ref during the drain: %v", err)
	}
}

// TestStagedFetchTimeout bounds a fetch whose caller sent no deadline: the
// caller gets an error reply that says so, and the handler never runs.
func TestStagedFetchTimeout(t *testing.T) {
	caller, server, _, _ := pair(t, velo.WithStagedFetchTimeout(100*time.Millisecond))
	var ran atomic.Int32
	if err := server.Register(velo.UnaryHandler("h", func(*velo.Context) ([]byte, error) { ran.Add(1); return nil, nil })); err != nil {
		t.Fatal(err)
	}
	if _, err := caller.Unary(context.Background(), server.InstanceID(), "h", nil); err != nil {
		t.Fatal(err)
	}
	ran.Store(0)
	hold := make(chan struct{})
	rendezvous.SetAcquireHook(caller.Rendezvous, func() { <-hold })
	errc := make(chan error, 1)
	go func() {
		_, err := caller.Unary(context.Background(), server.InstanceID(), "h", pattern(1<<20))
		errc <- err
	}()
	var err error
	select {
	case err = <-errc:
	case <-time.After(5 * time.Second):
		t.Fatal("no answer within 5 s of a 100 ms fetch bound")
	}
	close(hold)
	rendezvous.SetAcquireHook(caller.Rendezvous, nil)
	if err == nil || !strings.Contains(err.Error(), "not fetched in time") {
		t.Fatalf("err = %v, want the fetch timeout", err)
	}
	if ran.Load() != 0 {
		t.Fatal("the handler ran")
	}
	// Without a TTL the payload stays until its lease ends; the fetch
	// asked for a lease deadline, so the owner's sweep ends the lease. The
	// slot itself stays staged (a known limitation), until Discard here.
	waitFor(t, "the lease to end", func() bool { return !rendezvous.Sweeping(caller.Rendezvous) })
}

// TestStagedSendAndSync: fire-and-forget and sync requests are staged too,
// and their handlers see the caller's bytes.
func TestStagedSendAndSync(t *testing.T) {
	caller, server, _, _ := pair(t)
	seen := make(chan []byte, 2)
	if err := server.Register(velo.FireHandler("fire", func(c *velo.Context) { seen <- bytes.Clone(c.Payload) })); err != nil {
		t.Fatal(err)
	}
	if err := server.Register(velo.SyncHandler("sync", func(c *velo.Context) error { seen <- bytes.Clone(c.Payload); return nil })); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	want := pattern(3<<20 + 7)
	if err := caller.Send(ctx, server.InstanceID(), "fire", want); err != nil {
		t.Fatal(err)
	}
	if err := caller.Sync(ctx, server.InstanceID(), "sync", want); err != nil {
		t.Fatal(err)
	}
	for range 2 {
		select {
		case got := <-seen:
			if !bytes.Equal(got, want) {
				t.Fatal("a handler saw different bytes")
			}
		case <-ctx.Done():
			t.Fatal("a staged request never reached its handler")
		}
	}
	if staged, _ := caller.Rendezvous.Transparent(); staged != 2 {
		t.Fatalf("%d payloads staged, want 2", staged)
	}
	waitFor(t, "both payloads to be released", func() bool { b, _ := caller.Rendezvous.HeldBytes(); return b == 0 })
}

// TestDrainServesAStagedRequest: the caller (the owner of the staged
// payload) begins its drain while the receiver fetches; the acquire and
// pulls of that accepted work still pass, and the call completes.
func TestDrainServesAStagedRequest(t *testing.T) {
	caller, server, _, _ := pair(t)
	if err := server.Register(velo.UnaryHandler("len", func(c *velo.Context) ([]byte, error) {
		return []byte(fmt.Sprint(len(c.Payload))), nil
	})); err != nil {
		t.Fatal(err)
	}
	entered, hold := make(chan struct{}), make(chan struct{})
	var once atomic.Bool
	rendezvous.SetAcquireHook(caller.Rendezvous, func() {
		if once.CompareAndSwap(false, true) {
			close(entered)
			<-hold
		}
	})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	type result struct {
		resp []byte
		err  error
	}
	done := make(chan result, 1)
	go func() {
		resp, err := caller.Unary(ctx, server.InstanceID(), "len", pattern(4<<20))
		done <- result{resp, err}
	}()
	select {
	case <-entered:
	case <-ctx.Done():
		t.Fatal("the receiver never asked for the payload")
	}
	caller.BeginDrain()
	close(hold)
	r := <-done
	if r.err != nil || string(r.resp) != fmt.Sprint(4<<20) {
		t.Fatalf("a staged call across the owner's drain: %q %v", r.resp, r.err)
	}
	waitFor(t, "the release", func() bool { b, _ := caller.Rendezvous.HeldBytes(); return b == 0 })
}
