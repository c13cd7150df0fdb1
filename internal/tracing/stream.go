package tracing

import (
	"context"
	"fmt"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"
)

// A stream has no span of its own: it lives inside a request (a handler
// that produces tokens, a caller that consumes them), so its milestones
// are events on that request's span, the span of the context the
// producer attached with or the consumer reads with. A stream over the
// mux shares its frames with hundreds of others; a span per stream, or an
// event per token, would cost more than the tokens.

// Recording is the span of ctx if it records, else nil: the one test a
// stream makes, once, before it keeps a span for its first token.
func Recording(ctx context.Context) trace.Span {
	if span := trace.SpanFromContext(ctx); span.IsRecording() {
		return span
	}
	return nil
}

// AttachEvent puts a producer's attach on the span of ctx, if it records:
// the stream's kind ("spsc", "mpsc"), its handle, the transport the owner
// answered ("local" on the same worker) and, for a failed attach, the
// error.
func AttachEvent(ctx context.Context, kind string, handle fmt.Stringer, transport string, err error) {
	span := Recording(ctx)
	if span == nil {
		return
	}
	if transport == "" {
		transport = "local"
	}
	attrs := []attribute.KeyValue{
		KeyStreamKind.String(kind),
		KeyStreamHandle.String(handle.String()),
		KeyStreamAttachOK.Bool(err == nil),
	}
	if err == nil {
		attrs = append(attrs, KeyStreamPath.String(transport))
	} else {
		attrs = append(attrs, attribute.String("exception.message", err.Error()))
	}
	span.AddEvent(EventAttach, trace.WithAttributes(attrs...))
}

// Directions of a first token.
const (
	Sent     = "send"
	Received = "receive"
)

// FirstToken puts a stream's first item on span: way is Sent for the
// producer's first Send, Received for the consumer's first item.
func FirstToken(span trace.Span, way string, handle fmt.Stringer) {
	span.AddEvent(EventFirstToken, trace.WithAttributes(
		KeyStreamWay.String(way),
		KeyStreamHandle.String(handle.String()),
	))
}
