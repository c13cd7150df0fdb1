package velo_test

import (
	"context"
	"io"
	"testing"
	"time"

	"go.opentelemetry.io/otel/attribute"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/velo-go/velo"
	"github.com/velo-go/velo/streaming"
)

// TestTraceJoinsAStream: a frontend asks an engine, by a unary call, to
// stream three tokens to its anchor. With tracing on at both nodes the
// whole exchange is one trace: the frontend's request span, the client
// span, the engine's server span; the producer's attach and first token
// are events on the server span (the span of the context it attached
// with), and the consumer's first token is one on the request span (the
// context its Next got). Both stream paths: the mux and the per-stream
// connection.
func TestTraceJoinsAStream(t *testing.T) {
	for name, tc := range map[string]struct {
		opts []velo.Option
		key  string
	}{
		"mux":        {nil, "messenger-mux-v2"},
		"per-stream": {[]velo.Option{velo.WithMux(streaming.MuxConfig{Disabled: true})}, "tcp-stream"},
	} {
		t.Run(name, func(t *testing.T) {
			spans := tracetest.NewInMemoryExporter()
			tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(spans))
			defer tp.Shutdown(context.Background())
			opts := append([]velo.Option{velo.WithTracerProvider(tp)}, tc.opts...)
			frontend, engine := node(t, opts...), node(t, opts...)
			if err := frontend.RegisterPeer(engine.PeerInfo()); err != nil {
				t.Fatal(err)
			}
			if err := engine.Register(velo.TypedUnaryHandler("generate", func(c *velo.Context, h streaming.AnchorHandle) (int, error) {
				s, err := streaming.AttachAnchor[int](c.Context(), engine.Streams, h)
				if err != nil {
					return 0, err
				}
				for i := range 3 {
					if err := s.Send(c.Context(), i); err != nil {
						return 0, err
					}
				}
				return 3, s.Finalize()
			})); err != nil {
				t.Fatal(err)
			}
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			ctx, request := tp.Tracer("app").Start(ctx, "request")
			anchor, err := streaming.CreateAnchor[int](frontend.Streams)
			if err != nil {
				t.Fatal(err)
			}
			defer anchor.Close()
			if _, err := velo.TypedUnary[int](ctx, frontend, engine.InstanceID(), "generate", anchor.Handle()); err != nil {
				t.Fatal(err)
			}
			for i := 0; ; i++ {
				v, err := anchor.Next(ctx)
				if err == io.EOF {
					break
				}
				if err != nil || v != i {
					t.Fatalf("item %d: %v, %v", i, v, err)
				}
			}
			request.End()

			byKind := map[trace.SpanKind]tracetest.SpanStub{}
			var root tracetest.SpanStub
			for _, s := range spans.GetSpans() {
				switch {
				case s.Name == "request":
					root = s
				case s.Name == "velo.unary generate":
					byKind[s.SpanKind] = s
				}
			}
			client, server := byKind[trace.SpanKindClient], byKind[trace.SpanKindServer]
			tid := root.SpanContext.TraceID()
			if !tid.IsValid() || client.SpanContext.TraceID() != tid || server.SpanContext.TraceID() != tid {
				t.Fatalf("not one trace: request %s, client %s, server %s", tid, client.SpanContext.TraceID(), server.SpanContext.TraceID())
			}
			if server.Parent.SpanID() != client.SpanContext.SpanID() || client.Parent.SpanID() != root.SpanContext.SpanID() {
				t.Fatal("the spans do not nest request > client > server")
			}
			h := anchor.Handle().String()
			attach := event(t, server, "velo.stream.attach")
			wantAttrs(t, attach, map[attribute.Key]string{
				"velo.stream.kind": "spsc", "velo.stream.handle": h,
				"velo.stream.transport": tc.key, "velo.stream.attached": "true",
			})
			wantAttrs(t, event(t, server, "velo.stream.first_token"), map[attribute.Key]string{
				"velo.stream.direction": "send", "velo.stream.handle": h,
			})
			wantAttrs(t, event(t, root, "velo.stream.first_token"), map[attribute.Key]string{
				"velo.stream.direction": "receive", "velo.stream.handle": h,
			})
		})
	}
}

// event is span's one event called name.
func event(t *testing.T, span tracetest.SpanStub, name string) sdktrace.Event {
	t.Helper()
	var found []sdktrace.Event
	for _, e := range span.Events {
		if e.Name == name {
			found = append(found, e)
		}
	}
	if len(found) != 1 {
		t.Fatalf("span %q has %d events %q, want 1 (events: %v)", span.Name, len(found), name, span.Events)
	}
	return found[0]
}

func wantAttrs(t *testing.T, e sdktrace.Event, want map[attribute.Key]string) {
	t.Helper()
	got := map[attribute.Key]string{}
	for _, kv := range e.Attributes {
		got[kv.Key] = kv.Value.String()
	}
	for k, v := range want {
		if got[k] != v {
			t.Errorf("event %s: %s = %q, want %q (all: %v)", e.Name, k, got[k], v, got)
		}
	}
}

// TestStreamTraceEventsOffByDefault: without tracing, a producer that
// attaches and sends with a recording span of the application's in its
// context adds no event to it.
func TestStreamTraceEventsOffByDefault(t *testing.T) {
	spans := tracetest.NewInMemoryExporter()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(spans))
	defer tp.Shutdown(context.Background())
	a, b := node(t), node(t)
	if err := a.RegisterPeer(b.PeerInfo()); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	ctx, span := tp.Tracer("app").Start(ctx, "request")
	anchor, err := streaming.CreateAnchor[int](b.Streams)
	if err != nil {
		t.Fatal(err)
	}
	defer anchor.Close()
	s, err := streaming.AttachAnchor[int](ctx, a.Streams, anchor.Handle())
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Send(ctx, 1); err != nil {
		t.Fatal(err)
	}
	if _, err := anchor.Next(ctx); err != nil {
		t.Fatal(err)
	}
	if err := s.Finalize(); err != nil {
		t.Fatal(err)
	}
	span.End()
	got := spans.GetSpans()
	if len(got) != 1 || len(got[0].Events) != 0 {
		t.Fatalf("spans %v: want the application's one, with no event", got)
	}
}

// TestTraceJoinsAnMPSCStream: the same events for an MPSC stream over the
// mux: the producer's attach (kind mpsc) and first token on the engine's
// server span, the consumer's first item on the frontend's span.
func TestTraceJoinsAnMPSCStream(t *testing.T) {
	spans := tracetest.NewInMemoryExporter()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(spans))
	defer tp.Shutdown(context.Background())
	frontend, engine := node(t, velo.WithTracerProvider(tp)), node(t, velo.WithTracerProvider(tp))
	if err := frontend.RegisterPeer(engine.PeerInfo()); err != nil {
		t.Fatal(err)
	}
	if err := engine.Register(velo.TypedUnaryHandler("fan", func(c *velo.Context, h streaming.AnchorHandle) (int, error) {
		s, err := streaming.AttachMPSCAnchor[int](c.Context(), engine.Streams, h)
		if err != nil {
			return 0, err
		}
		for i := range 2 {
			if err := s.Send(c.Context(), i); err != nil {
				return 0, err
			}
		}
		return 2, s.Detach()
	})); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	ctx, request := tp.Tracer("app").Start(ctx, "request")
	anchor, err := streaming.CreateMPSCAnchor[int](frontend.Streams)
	if err != nil {
		t.Fatal(err)
	}
	defer anchor.Close()
	if _, err := velo.TypedUnary[int](ctx, frontend, engine.InstanceID(), "fan", anchor.Handle()); err != nil {
		t.Fatal(err)
	}
	for range 2 {
		if f, err := anchor.Next(ctx); err != nil || f.Kind != streaming.MPSCItem {
			t.Fatalf("frame %+v, %v", f, err)
		}
	}
	request.End()
	var root, server tracetest.SpanStub
	for _, s := range spans.GetSpans() {
		switch {
		case s.Name == "request":
			root = s
		case s.Name == "velo.unary fan" && s.SpanKind == trace.SpanKindServer:
			server = s
		}
	}
	if server.SpanContext.TraceID() != root.SpanContext.TraceID() || !root.SpanContext.IsValid() {
		t.Fatal("the server span is not in the request's trace")
	}
	h := anchor.Handle().String()
	wantAttrs(t, event(t, server, "velo.stream.attach"), map[attribute.Key]string{
		"velo.stream.kind": "mpsc", "velo.stream.handle": h, "velo.stream.transport": "messenger-mux-v2",
	})
	wantAttrs(t, event(t, server, "velo.stream.first_token"), map[attribute.Key]string{"velo.stream.direction": "send"})
	wantAttrs(t, event(t, root, "velo.stream.first_token"), map[attribute.Key]string{"velo.stream.direction": "receive"})
}
