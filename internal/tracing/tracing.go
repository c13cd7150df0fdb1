// Package tracing is velo's OpenTelemetry instrumentation: the spans of
// active messages and the trace context they carry in message headers,
// and the events of a stream's attach and first token. It depends on the
// OpenTelemetry API only (never the SDK): the application brings its
// TracerProvider and its exporter.
//
// Tracing is off unless a TracerProvider is given; then a *Tracer is nil
// and every caller tests for nil before doing anything, so an untraced
// node pays one comparison per call and puts nothing on the wire.
package tracing

import (
	"context"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"

	"github.com/velo-go/velo/ext"
	"github.com/velo-go/velo/internal/msgerr"
	"github.com/velo-go/velo/internal/msgwire"
)

// ScopeName is the instrumentation scope of velo's spans.
const ScopeName = "github.com/velo-go/velo"

// Attribute keys of velo's spans and events (docs/observability.md).
const (
	KeyRPCSystem      = attribute.Key("rpc.system")
	KeyRPCMethod      = attribute.Key("rpc.method")
	KeyResponseType   = attribute.Key("velo.response_type")
	KeyInstance       = attribute.Key("velo.instance_id")
	KeyPeerInstance   = attribute.Key("velo.peer.instance_id")
	KeyPeerWorker     = attribute.Key("velo.peer.worker_id")
	KeyErrorCode      = attribute.Key("velo.error_code")
	KeyStreamKind     = attribute.Key("velo.stream.kind")
	KeyStreamHandle   = attribute.Key("velo.stream.handle")
	KeyStreamPath     = attribute.Key("velo.stream.transport")
	KeyStreamWay      = attribute.Key("velo.stream.direction")
	KeyStreamAttachOK = attribute.Key("velo.stream.attached")
)

// Event names on a request's span.
const (
	EventAttach     = "velo.stream.attach"
	EventFirstToken = "velo.stream.first_token"
)

// Tracer makes velo's spans for one node. A nil *Tracer is tracing off.
type Tracer struct {
	tracer trace.Tracer
	prop   propagation.TextMapPropagator
	self   attribute.KeyValue
}

// New is the Tracer of the node self, or nil (off) when tp is nil. A nil
// prop is W3C Trace Context (traceparent, tracestate), which the Rust
// reference's distributed-tracing feature writes as well.
func New(tp trace.TracerProvider, prop propagation.TextMapPropagator, self ext.InstanceID) *Tracer {
	if tp == nil {
		return nil
	}
	if prop == nil {
		prop = propagation.TraceContext{}
	}
	return &Tracer{tracer: tp.Tracer(ScopeName), prop: prop, self: KeyInstance.String(self.String())}
}

// Traced reports whether a call to handler gets spans: user handlers do;
// velo's own ('_' names: handshakes, stream batches and attaches,
// rendezvous pulls, events, cancels) do not, so a trace shows what the
// application asked for. A stream's attach is an event on the span of
// the context it was given instead (AttachEvent).
func Traced(handler string) bool { return handler != "" && handler[0] != '_' }

// SpanName is the name of both spans of a call: "velo.unary <handler>",
// "velo.sync <handler>" (an ack/nack call) or "velo.send <handler>"
// (fire-and-forget), after the Go calls that make them.
func SpanName(rt msgwire.ResponseType, handler string) string {
	switch rt {
	case msgwire.UnaryResponse:
		return "velo.unary " + handler
	case msgwire.AckNack:
		return "velo.sync " + handler
	}
	return "velo.send " + handler
}

// responseType is the response_type label the metrics use for rt.
func responseType(rt msgwire.ResponseType) string {
	switch rt {
	case msgwire.UnaryResponse:
		return "unary"
	case msgwire.AckNack:
		return "ack_nack"
	}
	return "fire_and_forget"
}

// StartClient starts the client span of a call from this node to peer
// and returns the context that carries it and the headers the call must
// carry (nil when the propagator wrote none, as for a span that is not
// sampled under a propagator that skips those).
func (t *Tracer) StartClient(ctx context.Context, rt msgwire.ResponseType, handler string, peer ext.InstanceID) (context.Context, trace.Span, map[string]string) {
	ctx, span := t.tracer.Start(ctx, SpanName(rt, handler), trace.WithSpanKind(trace.SpanKindClient),
		trace.WithAttributes(
			KeyRPCSystem.String("velo"),
			KeyRPCMethod.String(handler),
			KeyResponseType.String(responseType(rt)),
			t.self,
			KeyPeerInstance.String(peer.String()),
		))
	carrier := propagation.MapCarrier{}
	t.prop.Inject(ctx, carrier)
	if len(carrier) == 0 {
		return ctx, span, nil
	}
	return ctx, span, carrier
}

// StartServer starts the server span of a request to handler, the child
// of the span context carrier holds (the request's headers), or a root
// when it holds none. The returned context carries the span: the
// handler's Context.Context is built on it.
func (t *Tracer) StartServer(carrier propagation.TextMapCarrier, rt msgwire.ResponseType, handler string, sender ext.WorkerID, senderID ext.InstanceID, known bool) (context.Context, trace.Span) {
	parent := t.prop.Extract(context.Background(), carrier)
	attrs := []attribute.KeyValue{
		KeyRPCSystem.String("velo"),
		KeyRPCMethod.String(handler),
		KeyResponseType.String(responseType(rt)),
		t.self,
		KeyPeerWorker.String(sender.String()),
	}
	if known {
		attrs = append(attrs, KeyPeerInstance.String(senderID.String()))
	}
	return t.tracer.Start(parent, SpanName(rt, handler), trace.WithSpanKind(trace.SpanKindServer), trace.WithAttributes(attrs...))
}

// End ends span with err's outcome: an error is recorded (an exception
// event), sets the status to Error with its text, and names its velo code.
func End(span trace.Span, err error) {
	if err != nil {
		span.RecordError(err)
		span.SetStatus(codes.Error, err.Error())
		span.SetAttributes(KeyErrorCode.String(msgerr.ErrorCode(err).String()))
	}
	span.End()
}
