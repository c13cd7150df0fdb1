package streaming

import (
	"context"
	"sync/atomic"

	"go.opentelemetry.io/otel/trace"

	"github.com/velo-go/velo/internal/tracing"
)

// Stream events on a request's span (docs/observability.md, "Tracing").
//
// A stream has no span of its own. With WithTraceEvents, a producer's
// attach is an event (velo.stream.attach) on the span of the context it
// attached with, and so is its first item (velo.stream.first_token,
// direction "send"); a consumer's first item is one on the span of the
// context its first successful Next, NextBytes or All was given
// (direction "receive"). The events are the same on every path: the same
// worker, the mux and the per-stream connection.
//
// Off (the default), an attach makes no test of its context, a Send one
// atomic load, and a consumer one test of a byte per item.

// WithTraceEvents records a stream's attach and first token as events on
// the span of the context the producer or consumer was given, when that
// span records. velo.WithTracerProvider turns it on for a Node's streams.
func WithTraceEvents() ManagerOption {
	return ManagerOption{func(c *nodeConfig) { c.traced = true }}
}

// Anchor.trace states: untraced, waiting for its first item, seen it.
const (
	anchorUntraced uint8 = iota
	anchorTraceWaiting
	anchorTraceDone
)

// traceAttach records a producer's attach on ctx's span and arms its first
// token, for a Manager with trace events.
func (m *Manager) traceAttach(ctx context.Context, kind string, handle AnchorHandle, p *firstToken, transport string, err error) {
	if !m.traced {
		return
	}
	tracing.AttachEvent(ctx, kind, handle, transport, err)
	if err == nil {
		if span := tracing.Recording(ctx); span != nil {
			p.arm(span)
		}
	}
}

// firstToken holds the span a producer's first item goes on, until it
// went: nil when there is none (untraced, or the first item went).
type firstToken struct {
	span atomic.Pointer[trace.Span]
}

func (f *firstToken) arm(span trace.Span) { f.span.Store(&span) }

// sent records the first item on the span it holds, once.
func (f *firstToken) sent(handle AnchorHandle) {
	if sp := f.span.Swap(nil); sp != nil {
		tracing.FirstToken(*sp, tracing.Sent, handle)
	}
}

// received records a consumer's first item on ctx's span, once per
// anchor; it is called only for an anchor that waits for its first.
func (a *Anchor[T]) received(ctx context.Context) { receivedFirst(ctx, &a.trace, a.Handle) }

// received is Anchor.received for an MPSC anchor: its first item of any
// producer.
func (an *MPSCAnchor[T]) received(ctx context.Context) { receivedFirst(ctx, &an.trace, an.Handle) }

func receivedFirst(ctx context.Context, state *uint8, handle func() AnchorHandle) {
	*state = anchorTraceDone
	if span := tracing.Recording(ctx); span != nil {
		tracing.FirstToken(span, tracing.Received, handle())
	}
}
