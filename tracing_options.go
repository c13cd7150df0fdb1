package velo

import (
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"

	"github.com/velo-go/velo/messenger"
	"github.com/velo-go/velo/streaming"
)

// WithTracerProvider turns on OpenTelemetry tracing with spans from tp
// (see docs/observability.md, "Tracing"):
//
//   - a call to a user handler (Send, Sync, Unary, UnaryAsync, the typed
//     calls) runs under a client span, "velo.unary <handler>" ("velo.sync",
//     "velo.send"), a child of the span in the call's context, and its
//     context travels in the request's headers as W3C traceparent (and
//     tracestate), the header a Rust velo node reads and writes;
//   - the handler runs under a server span of the same name, its child,
//     and Context.Context carries it: pass that context to the calls and
//     spans the handler makes, and they join the trace;
//   - a stream's attach and its first item are events on the span of the
//     context the producer attached with, and the consumer's first item
//     one on the span of the context its Next was given
//     (streaming.WithTraceEvents).
//
// A handler's error sets its span's status to Error, and a call's error
// its client span's. velo's own system messages are not traced. Without
// this option nothing is traced and no header is added.
func WithTracerProvider(tp trace.TracerProvider) Option {
	return Option{
		apply:  func(c *messenger.Config) { c.TracerProvider = tp },
		stream: []streaming.ManagerOption{streaming.WithTraceEvents()},
	}
}

// WithTracePropagator sets how trace context is written to and read from
// message headers (default propagation.TraceContext, W3C traceparent and
// tracestate; a composite with propagation.Baggage carries baggage too).
// Both ends must speak it: a Rust node reads W3C Trace Context. It does
// nothing without WithTracerProvider.
func WithTracePropagator(p propagation.TextMapPropagator) Option {
	return Option{apply: func(c *messenger.Config) { c.TracePropagator = p }}
}
