package quic_test

import (
	"context"
	"log/slog"
	"testing"

	"github.com/velo-go/velo"
	"github.com/velo-go/velo/ext"
	"github.com/velo-go/velo/transport/quic"
	"github.com/velo-go/velo/transport/tcp"
)

// BenchmarkUnaryRoundTrip is a 64 B unary call between two nodes on one
// transport, QUIC against TCP in one run.
func BenchmarkUnaryRoundTrip(b *testing.B) {
	for _, kind := range []string{"tcp", "quic"} {
		b.Run(kind, func(b *testing.B) {
			mk := func() *velo.Node {
				var tr ext.Transport
				var err error
				if kind == "tcp" {
					tr, err = tcp.New()
				} else {
					tr, err = quic.New()
				}
				if err != nil {
					b.Fatal(err)
				}
				n, err := velo.New(context.Background(), velo.WithTransport(tr), velo.WithLogger(slog.New(slog.DiscardHandler)))
				if err != nil {
					b.Fatal(err)
				}
				b.Cleanup(func() { n.Shutdown(context.Background()) })
				return n
			}
			server, client := mk(), mk()
			server.Register(velo.UnaryHandler("echo", func(c *velo.Context) ([]byte, error) { return append([]byte(nil), c.Payload...), nil }))
			if err := client.RegisterPeer(server.PeerInfo()); err != nil {
				b.Fatal(err)
			}
			payload := make([]byte, 64)
			ctx := context.Background()
			if _, err := client.Unary(ctx, server.InstanceID(), "echo", payload); err != nil {
				b.Fatal(err)
			}
			b.ReportAllocs()
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				if _, err := client.Unary(ctx, server.InstanceID(), "echo", payload); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
