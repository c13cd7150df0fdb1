//go:build ucx

package ucx

import (
	"context"
	"testing"
	"time"

	"github.com/velo-go/velo"
	"github.com/velo-go/velo/ext"
	"github.com/velo-go/velo/transport/tcp"
)

// BenchmarkUnaryRTT is one unary call of 64 bytes between two nodes of
// this process, over UCX (UCX_TLS from the environment, tcp by default)
// and over the TCP transport, for comparison in one run.
func BenchmarkUnaryRTT(b *testing.B) {
	for _, arm := range []struct {
		name string
		mk   func(testing.TB) ext.Transport
	}{
		{"ucx", func(t testing.TB) ext.Transport { return newReal(t) }},
		{"ucx-spin1ms", func(t testing.TB) ext.Transport { return newReal(t, WithSpin(time.Millisecond)) }},
		{"tcp", func(t testing.TB) ext.Transport {
			tr, err := tcp.New(tcp.WithListenAddr("127.0.0.1:0"))
			if err != nil {
				t.Fatal(err)
			}
			return tr
		}},
	} {
		b.Run(arm.name, func(b *testing.B) {
			ctx := context.Background()
			nodes := make([]*velo.Node, 2)
			for i := range nodes {
				n, err := velo.New(ctx, velo.WithTransport(arm.mk(b)))
				if err != nil {
					b.Fatal(err)
				}
				defer n.Shutdown(ctx)
				nodes[i] = n
			}
			a, srv := nodes[0], nodes[1]
			srv.Register(velo.UnaryHandler("echo", func(c *velo.Context) ([]byte, error) { return c.Payload, nil }))
			if err := a.RegisterPeer(srv.PeerInfo()); err != nil {
				b.Fatal(err)
			}
			if err := srv.RegisterPeer(a.PeerInfo()); err != nil {
				b.Fatal(err)
			}
			p := make([]byte, 64)
			if _, err := a.Unary(ctx, srv.InstanceID(), "echo", p); err != nil {
				b.Fatal(err)
			}
			b.ReportAllocs()
			b.ResetTimer()
			for range b.N {
				if _, err := a.Unary(ctx, srv.InstanceID(), "echo", p); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
