package messenger_test

import (
	"context"
	"errors"
	"testing"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/velo-go/velo"
	"github.com/velo-go/velo/ext"
	"github.com/velo-go/velo/internal/frame"
	"github.com/velo-go/velo/internal/mpwrite"
)

// tracedPair is pair with tracing on at both nodes, into one in-memory
// exporter (spans are exported as they end).
func tracedPair(t *testing.T) (caller, server *velo.Node, tp *sdktrace.TracerProvider, spans *tracetest.InMemoryExporter) {
	t.Helper()
	spans = tracetest.NewInMemoryExporter()
	tp = sdktrace.NewTracerProvider(sdktrace.WithSyncer(spans))
	t.Cleanup(func() { tp.Shutdown(context.Background()) })
	opt := []velo.Option{velo.WithTracerProvider(tp)}
	caller, server = pair(t, opt, opt)
	return caller, server, tp, spans
}

// spanNamed is the one ended span called name, of kind.
func spanNamed(t *testing.T, spans *tracetest.InMemoryExporter, name string, kind trace.SpanKind) tracetest.SpanStub {
	t.Helper()
	var found []tracetest.SpanStub
	for _, s := range spans.GetSpans() {
		if s.Name == name && s.SpanKind == kind {
			found = append(found, s)
		}
	}
	if len(found) != 1 {
		t.Fatalf("%d %v spans named %q, want 1; have %v", len(found), kind, name, spanNames(spans))
	}
	return found[0]
}

func spanNames(spans *tracetest.InMemoryExporter) []string {
	var names []string
	for _, s := range spans.GetSpans() {
		names = append(names, s.Name+"/"+s.SpanKind.String())
	}
	return names
}

func attr(s tracetest.SpanStub, key attribute.Key) (string, bool) {
	for _, kv := range s.Attributes {
		if kv.Key == key {
			return kv.Value.String(), true
		}
	}
	return "", false
}

// childOf fails unless child's parent is parent, in parent's trace.
func childOf(t *testing.T, child, parent tracetest.SpanStub) {
	t.Helper()
	if child.SpanContext.TraceID() != parent.SpanContext.TraceID() {
		t.Fatalf("%s is in trace %s, %s in %s: not one trace", child.Name, child.SpanContext.TraceID(), parent.Name, parent.SpanContext.TraceID())
	}
	if child.Parent.SpanID() != parent.SpanContext.SpanID() {
		t.Fatalf("%s's parent is %s, want %s (%s)", child.Name, child.Parent.SpanID(), parent.SpanContext.SpanID(), parent.Name)
	}
}

// TestTraceJoinsAUnaryCall: a unary call between two traced nodes over TCP
// is one trace: the application's span, the client span under it, the
// handler's server span under that (its context carried in the request's
// traceparent), and a span the handler starts from its Context.Context
// under the server span.
func TestTraceJoinsAUnaryCall(t *testing.T) {
	a, b, tp, spans := tracedPair(t)
	app := tp.Tracer("app")
	got := make(chan map[string]string, 1)
	must(t, b.Register(velo.UnaryHandler("echo", func(c *velo.Context) ([]byte, error) {
		h, _ := c.Headers()
		got <- h
		_, work := app.Start(c.Context(), "work")
		work.End()
		return c.Payload, nil
	})))
	ctx, root := app.Start(testCtx(t), "request")
	if _, err := a.Unary(ctx, b.InstanceID(), "echo", []byte("hi")); err != nil {
		t.Fatal(err)
	}
	root.End()

	client := spanNamed(t, spans, "velo.unary echo", trace.SpanKindClient)
	server := spanNamed(t, spans, "velo.unary echo", trace.SpanKindServer)
	work := spanNamed(t, spans, "work", trace.SpanKindInternal)
	request := spanNamed(t, spans, "request", trace.SpanKindInternal)
	childOf(t, client, request)
	childOf(t, server, client)
	childOf(t, work, server)
	if !server.Parent.IsRemote() {
		t.Fatal("the server span's parent is not marked remote: it did not come from the wire")
	}
	// The header is W3C traceparent naming the client span, sampled.
	want := "00-" + client.SpanContext.TraceID().String() + "-" + client.SpanContext.SpanID().String() + "-01"
	if h := recv(t, got, "the handler's headers"); h["traceparent"] != want {
		t.Fatalf("traceparent = %q, want %q", h["traceparent"], want)
	}
	for key, want := range map[attribute.Key]string{
		"rpc.system": "velo", "rpc.method": "echo", "velo.response_type": "unary",
		"velo.peer.instance_id": b.InstanceID().String(), "velo.instance_id": a.InstanceID().String(),
	} {
		if v, _ := attr(client, key); v != want {
			t.Errorf("client span %s = %q, want %q", key, v, want)
		}
	}
	if v, _ := attr(server, "velo.peer.instance_id"); v != a.InstanceID().String() {
		t.Errorf("server span velo.peer.instance_id = %q, want the caller %s", v, a.InstanceID())
	}
	if v, _ := attr(server, "velo.peer.worker_id"); v != a.WorkerID().String() {
		t.Errorf("server span velo.peer.worker_id = %q, want %s", v, a.WorkerID())
	}
	if client.Status.Code != codes.Unset || server.Status.Code != codes.Unset {
		t.Errorf("statuses of a call that worked: client %v, server %v, want Unset", client.Status, server.Status)
	}
}

// TestTraceRecordsAHandlerError: a handler's error sets the Error status
// on its server span (with the error's velo code and an exception event)
// and on the caller's client span.
func TestTraceRecordsAHandlerError(t *testing.T) {
	a, b, _, spans := tracedPair(t)
	must(t, b.Register(velo.UnaryHandler("find", func(c *velo.Context) ([]byte, error) {
		return nil, velo.Errorf(velo.NotFound, "no such thing")
	})))
	_, err := a.Unary(testCtx(t), b.InstanceID(), "find", nil)
	var re *velo.RemoteError
	if !errors.As(err, &re) {
		t.Fatalf("err = %v, want a RemoteError", err)
	}
	server := spanNamed(t, spans, "velo.unary find", trace.SpanKindServer)
	client := spanNamed(t, spans, "velo.unary find", trace.SpanKindClient)
	for _, s := range []tracetest.SpanStub{server, client} {
		if s.Status.Code != codes.Error || s.Status.Description == "" {
			t.Errorf("%v span status = %+v, want Error with the text", s.SpanKind, s.Status)
		}
		if v, _ := attr(s, "velo.error_code"); v != velo.NotFound.String() {
			t.Errorf("%v span velo.error_code = %q, want %q", s.SpanKind, v, velo.NotFound.String())
		}
		if len(s.Events) == 0 || s.Events[0].Name != "exception" {
			t.Errorf("%v span events = %v, want the recorded error", s.SpanKind, s.Events)
		}
	}
}

// TestTraceCoversEveryCallPattern: Sync, Send and UnaryAsync also make a
// client and a server span in one trace; UnaryAsync's client span ends
// when its callback runs.
func TestTraceCoversEveryCallPattern(t *testing.T) {
	a, b, _, spans := tracedPair(t)
	fired := make(chan struct{}, 1)
	must(t, b.Register(velo.SyncHandler("sync", func(*velo.Context) error { return nil })))
	must(t, b.Register(velo.FireHandler("fire", func(*velo.Context) { fired <- struct{}{} })))
	must(t, b.Register(velo.UnaryHandler("async", func(c *velo.Context) ([]byte, error) { return nil, nil })))
	ctx := testCtx(t)
	must(t, a.Sync(ctx, b.InstanceID(), "sync", nil))
	must(t, a.Send(ctx, b.InstanceID(), "fire", nil))
	recv(t, fired, "the fire-and-forget handler")
	done := make(chan error, 1)
	must(t, a.UnaryAsync(ctx, b.InstanceID(), "async", nil, func(_ []byte, err error) { done <- err }))
	must(t, recv(t, done, "the asynchronous answer"))
	for _, name := range []string{"velo.sync sync", "velo.send fire", "velo.unary async"} {
		var server tracetest.SpanStub
		waitFor(t, name+"'s server span", func() bool { // a fire-and-forget handler's span ends after the signal
			for _, s := range spans.GetSpans() {
				if s.Name == name && s.SpanKind == trace.SpanKindServer {
					server = s
					return true
				}
			}
			return false
		})
		childOf(t, server, spanNamed(t, spans, name, trace.SpanKindClient))
	}
}

// rustTraceparent is the traceparent of the W3C specification's example,
// the one the reference's tests use (velo's messenger/client/tests.rs).
const rustTraceparent = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"

// rustHeaders is the header map a Rust node with the distributed-tracing
// feature writes for that context: rmp-serde's fixmap of one str key and a
// str8 value, whose entry is 69 bytes (the reference's figure).
var rustHeaders = []byte("\x81\xabtraceparent\xd9\x37" + rustTraceparent)

// TestTraceJoinsARustTraceparent: a request written as a Rust node writes
// it, with the W3C traceparent in its header map, runs its handler under
// a server span that is a child of the Rust span, in the Rust trace.
func TestTraceJoinsARustTraceparent(t *testing.T) {
	if n := len(rustHeaders) - 1; n != 69 {
		t.Fatalf("the golden entry is %d bytes, the reference says 69", n)
	}
	if got := mpwrite.AppendStr(mpwrite.AppendStr([]byte{0x81}, "traceparent"), rustTraceparent); string(got) != string(rustHeaders) {
		t.Fatalf("the golden vector is not the MessagePack of its map: % x", got)
	}
	a, b, _, spans := tracedPair(t)
	ran := make(chan struct{}, 1)
	must(t, b.Register(velo.FireHandler("probe", func(*velo.Context) { ran <- struct{}{} })))
	_, err := a.RemoteHandlers(testCtx(t), b.InstanceID()) // the raw frames speak as a, after its handshake
	must(t, err)
	conn := rawConn(t, b)
	proveAs(t, conn, a)
	hdr := wireRequestHeader(0, uint64(a.WorkerID()), 0, "probe", rustHeaders)
	_, err = conn.Write(frame.Append(nil, ext.Frame{Type: ext.Message, Header: hdr}))
	must(t, err)
	recv(t, ran, "the handler of the Rust-formatted request")
	var server tracetest.SpanStub
	waitFor(t, "the server span", func() bool {
		for _, s := range spans.GetSpans() {
			if s.Name == "velo.send probe" {
				server = s
				return true
			}
		}
		return false
	})
	if got := server.SpanContext.TraceID().String(); got != "4bf92f3577b34da6a3ce929d0e0e4736" {
		t.Fatalf("the server span is in trace %s, not the Rust one", got)
	}
	if got := server.Parent.SpanID().String(); got != "00f067aa0ba902b7" || !server.Parent.IsRemote() {
		t.Fatalf("the server span's parent is %s (remote %v), want the Rust span 00f067aa0ba902b7", got, server.Parent.IsRemote())
	}
	if server.SpanKind != trace.SpanKindServer {
		t.Fatalf("kind %v, want Server", server.SpanKind)
	}
}

// TestTracingOffCostsNothing: between nodes without a TracerProvider, a
// unary call whose context holds a recording span (the application traces,
// velo does not) carries no header at all, makes no span, and allocates
// what an untraced round trip allocated before tracing existed:
// unaryRoundTripAllocs' measured 2 (one more under the race detector,
// whose sync.Pool drops buffers). The traced figure is logged beside it.
func TestTracingOffCostsNothing(t *testing.T) {
	if testing.Short() {
		t.Skip("counts allocations over 1000 round trips")
	}
	const before = 2 // measured on main before tracing: see unaryRoundTripAllocs
	spans := tracetest.NewInMemoryExporter()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(spans))
	defer tp.Shutdown(context.Background())
	// No deadline: a request without one carries no header of velo's own,
	// so an empty map on arrival means nothing was added.
	ctx, span := tp.Tracer("app").Start(context.Background(), "request")
	defer span.End()

	measure := func(a, b *velo.Node, traced bool) float64 {
		seen := make(chan map[string]string, 1)
		must(t, b.Register(velo.UnaryHandler("probe", func(c *velo.Context) ([]byte, error) {
			h, err := c.Headers()
			seen <- h
			return nil, err
		})))
		must(t, b.Register(velo.UnaryHandler("echo64", func(c *velo.Context) ([]byte, error) { return c.Payload, nil })))
		if _, err := a.Unary(ctx, b.InstanceID(), "probe", nil); err != nil {
			t.Fatal(err)
		}
		switch h := recv(t, seen, "the probe's headers"); {
		case !traced && h != nil:
			t.Fatalf("an untraced call carried headers %v", h)
		case traced && h["traceparent"] == "":
			t.Fatalf("a traced call carried headers %v, no traceparent", h)
		}
		payload := make([]byte, 64)
		call := func() {
			if _, err := a.Unary(ctx, b.InstanceID(), "echo64", payload); err != nil {
				t.Fatal(err)
			}
		}
		for range 200 {
			call()
		}
		return testing.AllocsPerRun(1000, call)
	}
	a0, b0 := pair(t, nil, nil)
	off := measure(a0, b0, false)
	if n := len(spans.GetSpans()); n != 0 {
		t.Fatalf("untraced nodes made %d spans", n)
	}
	a, b, _, _ := tracedPair(t)
	on := measure(a, b, true)
	t.Logf("allocations per unary round trip (both sides): %v tracing off, %v tracing on (in-memory SDK, always sampled)", off, on)
	slack := 0.0
	if raceEnabled {
		slack = 1
	}
	if off > before+slack {
		t.Fatalf("tracing off: %v allocations per round trip, want %v as before tracing", off, before)
	}
}
