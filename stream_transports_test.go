package velo_test

import (
	"context"
	"log/slog"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"

	"github.com/velo-go/velo"
	"github.com/velo-go/velo/ext"
	"github.com/velo-go/velo/internal/embedded"
	"github.com/velo-go/velo/streaming"
	grpctr "github.com/velo-go/velo/transport/grpc"
	natstr "github.com/velo-go/velo/transport/nats"
	"github.com/velo-go/velo/transport/quic"
	"github.com/velo-go/velo/transport/zmq"
)

// A response stream runs over the mux on every messenger transport: two
// nodes with that transport alone and the mux only (no per-stream
// listener) stream 200 items, and the stream says it negotiated the mux.
func TestStreamsRideTheMuxOnEveryTransport(t *testing.T) {
	var natsURL string
	transports := map[string]func() (ext.Transport, error){
		"quic": func() (ext.Transport, error) { return quic.New() },
		"grpc": func() (ext.Transport, error) { return grpctr.New() },
		"zmq":  func() (ext.Transport, error) { return zmq.New() },
		"nats": func() (ext.Transport, error) { return natstr.New(natstr.WithURL(natsURL)) },
	}
	dir := t.TempDir()
	srv, err := embedded.StartNATS(dir, func(o *server.Options) { o.JetStream = false })
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(srv.Stop)
	natsURL = srv.URL()
	for name, mk := range transports {
		t.Run(name, func(t *testing.T) {
			start := func() *velo.Node {
				tr, err := mk()
				if err != nil {
					t.Fatal(err)
				}
				n, err := velo.New(context.Background(), velo.WithTransport(tr), velo.WithMuxOnly(),
					velo.WithLogger(slog.New(slog.DiscardHandler)))
				if err != nil {
					t.Fatal(err)
				}
				t.Cleanup(func() {
					ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
					defer cancel()
					n.Shutdown(ctx)
				})
				return n
			}
			frontend, engine := start(), start()
			negotiated := make(chan string, 1)
			if err := engine.Register(velo.TypedUnaryHandler("generate", func(c *velo.Context, h streaming.AnchorHandle) (int, error) {
				s, err := streaming.AttachAnchor[int](c.Context(), engine.Streams, h)
				if err != nil {
					return 0, err
				}
				negotiated <- s.NegotiatedTransport()
				for i := range 200 {
					if err := s.Send(c.Context(), i); err != nil {
						return 0, err
					}
				}
				return 200, s.Finalize()
			})); err != nil {
				t.Fatal(err)
			}
			if err := frontend.RegisterPeer(engine.PeerInfo()); err != nil {
				t.Fatal(err)
			}
			if err := engine.RegisterPeer(frontend.PeerInfo()); err != nil {
				t.Fatal(err)
			}
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			anchor, err := streaming.CreateAnchor[int](frontend.Streams)
			if err != nil {
				t.Fatal(err)
			}
			called := make(chan error, 1)
			go func() {
				_, err := velo.TypedUnary[int](ctx, frontend, engine.InstanceID(), "generate", anchor.Handle())
				called <- err
			}()
			next := 0
			for v, err := range anchor.All(ctx) {
				if err != nil {
					t.Fatalf("item %d: %v", next, err)
				}
				if v != next {
					t.Fatalf("item %d arrived as %d", next, v)
				}
				next++
			}
			if next != 200 {
				t.Fatalf("%d items, want 200", next)
			}
			if err := <-called; err != nil {
				t.Fatal(err)
			}
			if got := <-negotiated; got != "messenger-mux-v2" {
				t.Fatalf("the stream negotiated %q, want the mux", got)
			}
		})
	}
}
