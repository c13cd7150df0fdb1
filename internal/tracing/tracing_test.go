package tracing

import (
	"context"
	"errors"
	"testing"

	"go.opentelemetry.io/otel/codes"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/velo-go/velo/ext"
	"github.com/velo-go/velo/internal/msgwire"
)

func TestOffWithoutAProvider(t *testing.T) {
	if New(nil, nil, ext.NewInstanceID()) != nil {
		t.Fatal("a Tracer without a TracerProvider: tracing must be off (nil)")
	}
}

func TestNamesAndWhatIsTraced(t *testing.T) {
	for rt, want := range map[msgwire.ResponseType]string{
		msgwire.UnaryResponse: "velo.unary h", msgwire.AckNack: "velo.sync h", msgwire.FireAndForget: "velo.send h",
	} {
		if got := SpanName(rt, "h"); got != want {
			t.Errorf("SpanName(%v) = %q, want %q", rt, got, want)
		}
	}
	if Traced("_hello") || Traced("") || !Traced("generate") {
		t.Fatal("only user handlers are traced")
	}
}

// TestClientContextRoundTrips: what StartClient injects, StartServer
// extracts as the parent of the server span; an ended span with an error
// has the Error status.
func TestClientContextRoundTrips(t *testing.T) {
	spans := tracetest.NewInMemoryExporter()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(spans))
	defer tp.Shutdown(context.Background())
	tr := New(tp, nil, ext.NewInstanceID())
	_, client, carrier := tr.StartClient(context.Background(), msgwire.UnaryResponse, "h", ext.NewInstanceID())
	if len(carrier) != 1 || carrier["traceparent"] == "" {
		t.Fatalf("injected %v, want one traceparent", carrier)
	}
	ctx, server := tr.StartServer(mapCarrier(carrier), msgwire.UnaryResponse, "h", 7, ext.InstanceID{}, false)
	if trace.SpanFromContext(ctx) != server {
		t.Fatal("the server context does not carry the server span")
	}
	End(server, errors.New("boom"))
	End(client, nil)
	got := spans.GetSpans()
	if len(got) != 2 || got[0].Parent.SpanID() != got[1].SpanContext.SpanID() {
		t.Fatalf("spans %v: want the server span under the client span", got)
	}
	if got[0].Status.Code != codes.Error || got[1].Status.Code != codes.Unset {
		t.Fatalf("statuses %v, %v", got[0].Status, got[1].Status)
	}
}

type mapCarrier map[string]string

func (m mapCarrier) Get(k string) string { return m[k] }
func (m mapCarrier) Set(k, v string)     { m[k] = v }
func (m mapCarrier) Keys() []string {
	var ks []string
	for k := range m {
		ks = append(ks, k)
	}
	return ks
}
