package rendezvous_test

import (
	"context"
	"fmt"
	"testing"

	"github.com/velo-go/velo"
	"github.com/velo-go/velo/internal/msgrx"
)

// BenchmarkGet pulls a staged payload between two nodes on loopback and
// releases it: the fetch buffer's growth (one more copy of the bytes at
// most) shows here against the pull itself.
func BenchmarkGet(b *testing.B) {
	for _, size := range []int{1 << 20, 4 << 20, 16 << 20, 64 << 20} {
		b.Run(fmt.Sprintf("%dMiB", size>>20), func(b *testing.B) {
			consumer, owner := newBenchPair(b)
			ctx := context.Background()
			data := pattern(size)
			b.SetBytes(int64(size))
			b.ReportAllocs()
			for b.Loop() {
				h := owner.Rendezvous.RegisterData(data)
				got, lease, err := consumer.Rendezvous.Get(ctx, h)
				if err != nil || len(got) != size {
					b.Fatalf("get: %d bytes, %v", len(got), err)
				}
				if err := consumer.Rendezvous.Release(ctx, h, lease); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// newBenchPair is a consumer and an owner that know each other.
func newBenchPair(b *testing.B) (consumer, owner *velo.Node) {
	consumer, _ = newNode(b)
	owner, _ = newNode(b)
	if err := consumer.RegisterPeer(owner.PeerInfo()); err != nil {
		b.Fatal(err)
	}
	if err := msgrx.Handshake(consumer.Messenger(), context.Background(), owner.InstanceID()); err != nil {
		b.Fatal(err)
	}
	return consumer, owner
}
