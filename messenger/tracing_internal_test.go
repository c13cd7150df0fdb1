package messenger

import (
	"bytes"
	"context"
	"encoding/hex"
	"testing"
	"time"

	"go.opentelemetry.io/otel/propagation"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"

	"github.com/velo-go/velo/ext"
	"github.com/velo-go/velo/internal/msgwire"
	"github.com/velo-go/velo/internal/tracing"
)

// The W3C specification's example context, which the Rust reference's
// tests use too (messenger/client/tests.rs).
const (
	goldenTraceID     = "4bf92f3577b34da6a3ce929d0e0e4736"
	goldenSpanID      = "00f067aa0ba902b7"
	goldenTraceparent = "00-" + goldenTraceID + "-" + goldenSpanID + "-01"
)

// goldenTraceHeaders is the whole header map for that context, byte for
// byte as rmp-serde writes the reference's HashMap<String, String> of one
// entry: fixmap 1, fixstr "traceparent", str8 of 55 bytes.
var goldenTraceHeaders = []byte("\x81\xabtraceparent\xd9\x37" + goldenTraceparent)

// fixedIDs gives every span the golden ids, so that the client span's
// traceparent is the golden one.
type fixedIDs struct{}

func (fixedIDs) NewIDs(context.Context) (trace.TraceID, trace.SpanID) {
	t, _ := trace.TraceIDFromHex(goldenTraceID)
	s, _ := trace.SpanIDFromHex(goldenSpanID)
	return t, s
}

func (fixedIDs) NewSpanID(context.Context, trace.TraceID) trace.SpanID {
	s, _ := trace.SpanIDFromHex(goldenSpanID)
	return s
}

func goldenMessenger(t *testing.T) *Messenger {
	tp := sdktrace.NewTracerProvider(sdktrace.WithIDGenerator(fixedIDs{}))
	t.Cleanup(func() { tp.Shutdown(context.Background()) })
	return &Messenger{tr: tracing.New(tp, nil, ext.NewInstanceID())}
}

// TestTraceparentHeaderGolden: the header map a traced call carries is the
// reference's bytes exactly; a caller's own "traceparent" (a handler that
// forwards what it got) is replaced, not doubled; with a deadline the
// request header holds both entries, the deadline first.
func TestTraceparentHeaderGolden(t *testing.T) {
	m := goldenMessenger(t)
	_, span, opts := m.startClientSpan(context.Background(), msgwire.UnaryResponse, "echo", ext.NewInstanceID(), nil)
	defer span.End()
	hb, err := m.prepare("echo", opts)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(hb, goldenTraceHeaders) {
		t.Fatalf("headers\n% x\nwant\n% x", hb, goldenTraceHeaders)
	}

	stale := append([]CallOption{WithHeaders(map[string]string{"traceparent": "stale"})}, opts...)
	hb, err = m.prepare("echo", stale)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(hb, goldenTraceHeaders) {
		t.Fatalf("with a stale traceparent of the caller's: % x", hb)
	}

	hdr := appendRequestHeaderDeadline(nil, msgwire.UnaryResponse, msgwire.ResponseID{Lo: 1, Hi: 2}, "echo", hb, time.Now().Add(time.Minute))
	req, err := parseRequestHeader(hdr)
	if err != nil {
		t.Fatal(err)
	}
	if v, ok := lookupHeader(req.headers, "traceparent"); !ok || string(v) != goldenTraceparent {
		t.Fatalf("traceparent beside the deadline = %q, %v", v, ok)
	}
	if headerDeadline(req.headers).IsZero() {
		t.Fatal("the deadline is lost beside the traceparent")
	}
}

// TestTraceparentExtractGolden: the reference's header bytes, read in
// place, give the golden remote span context, and so does the map
// with other entries around it.
func TestTraceparentExtractGolden(t *testing.T) {
	withOthers, err := msgwire.EncodeHeaders(map[string]string{"a": "1", "traceparent": goldenTraceparent, "zz": "2"})
	if err != nil {
		t.Fatal(err)
	}
	for name, hb := range map[string][]byte{"reference": goldenTraceHeaders, "among others": withOthers} {
		sc := trace.SpanContextFromContext(propagation.TraceContext{}.Extract(context.Background(), headerCarrier(hb)))
		if sc.TraceID().String() != goldenTraceID || sc.SpanID().String() != goldenSpanID || !sc.IsSampled() || !sc.IsRemote() {
			t.Fatalf("%s: extracted %v, want the golden context", name, sc)
		}
	}
	if keys := headerCarrier(withOthers).Keys(); len(keys) != 3 {
		t.Fatalf("keys = %v", keys)
	}
	// A malformed traceparent is no context: the server span is a root.
	bad, _ := msgwire.EncodeHeaders(map[string]string{"traceparent": "00-" + hex.EncodeToString(make([]byte, 16)) + "-" + goldenSpanID + "-01"})
	if sc := trace.SpanContextFromContext(propagation.TraceContext{}.Extract(context.Background(), headerCarrier(bad))); sc.IsValid() {
		t.Fatalf("an all-zero trace id gave %v", sc)
	}
}

// FuzzTraceHeaders: any header map, read by the propagator through
// headerCarrier, never panics, and a context it yields is a valid one.
func FuzzTraceHeaders(f *testing.F) {
	f.Add(goldenTraceHeaders)
	f.Add([]byte{0x80})
	f.Add([]byte("\x82\xabtraceparent\xd9\x37" + goldenTraceparent + "\xaatracestate\xa5k=v,x"))
	f.Add([]byte("\x81\xabtraceparent\xa3bad"))
	f.Fuzz(func(t *testing.T, hb []byte) {
		c := headerCarrier(hb)
		_ = c.Keys()
		ctx := propagation.NewCompositeTextMapPropagator(propagation.TraceContext{}, propagation.Baggage{}).Extract(context.Background(), c)
		if sc := trace.SpanContextFromContext(ctx); sc.IsValid() && !sc.IsRemote() {
			t.Fatalf("extracted a context that is not remote: %v", sc)
		}
	})
}
