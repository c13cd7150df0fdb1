package messenger

import (
	"context"

	"go.opentelemetry.io/otel/trace"

	"github.com/velo-go/velo/ext"
	"github.com/velo-go/velo/internal/msgwire"
	"github.com/velo-go/velo/internal/tracing"
)

// Tracing (Config.TracerProvider; docs/observability.md, "Tracing").
//
// A call to a user handler (Send, Sync, Unary, UnaryAsync and the typed
// calls) runs under a client span, whose context goes in the request's
// header map as the propagator writes it (W3C traceparent and tracestate
// by default, the keys and format the Rust reference's
// distributed-tracing feature writes and reads). The handler runs under a
// server span, the child of the context the request carried (a root when
// it carried none), and its Context.Context carries that span.
//
// Off (no TracerProvider), m.tr is nil: a call pays one nil test and the
// request carries no header it would not carry otherwise. velo's own
// handlers ('_' names) are never traced (tracing.Traced).

// startClientSpan starts the client span of a call to handler on target
// and adds the trace context to the call's headers.
func (m *Messenger) startClientSpan(ctx context.Context, rt msgwire.ResponseType, handler string, target ext.InstanceID, opts []CallOption) (context.Context, trace.Span, []CallOption) {
	ctx, span, carrier := m.tr.StartClient(ctx, rt, handler, target)
	if carrier != nil {
		opts = append(opts[:len(opts):len(opts)], func(o *callOptions) { o.inject = carrier })
	}
	return ctx, span, opts
}

// tracedUnaryAsync is UnaryAsync under a client span, which ends when the
// call completes (or at once, when it fails to start).
func (m *Messenger) tracedUnaryAsync(ctx context.Context, target ext.InstanceID, handler string, payload []byte, done func([]byte, error), opts []CallOption) error {
	ctx, span, opts := m.startClientSpan(ctx, msgwire.UnaryResponse, handler, target, opts)
	_, err := m.unaryAsyncCall(ctx, target, handler, payload, func(resp []byte, err error) {
		tracing.End(span, err)
		done(resp, err)
	}, opts...)
	if err != nil {
		tracing.End(span, err)
	}
	return err
}

// withInjected is h with the trace context's keys set over it: the
// injected value wins a collision (a handler that forwards the headers it
// got, traceparent included), as in the reference. h is not changed.
func withInjected(h, inject map[string]string) map[string]string {
	out := make(map[string]string, len(h)+len(inject))
	for k, v := range h {
		out[k] = v
	}
	for k, v := range inject {
		out[k] = v
	}
	return out
}

// startServerSpan starts the server span of the request c and gives c the
// handler context that carries it (made now, not on first use: the span
// must reach a handler that asks later). The caller ends the span.
func (m *Messenger) startServerSpan(c *Context) trace.Span {
	inst, known := m.peers.byWorker(c.sender)
	ctx, span := m.tr.StartServer(headerCarrier(c.headers), c.rtype, c.Handler, c.sender, inst, known)
	c.hc.Store(m.openHandlerCtxIn(ctx, ctxKey{conn: c.conn, caller: c.sender, token: c.token}, c.dl))
	return span
}

// headerCarrier reads a request's encoded header map for a propagator
// without decoding what it does not ask for.
type headerCarrier []byte

func (h headerCarrier) Get(key string) string {
	v, _ := lookupHeader(h, key)
	return string(v)
}

// Set is never called: a carrier of received headers is only read.
func (h headerCarrier) Set(string, string) {}

func (h headerCarrier) Keys() []string {
	m, _ := msgwire.DecodeHeaders(h)
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	return keys
}
