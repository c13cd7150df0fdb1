package rendezvous_test

import (
	"context"
	"fmt"
	"testing"

	"github.com/velo-go/velo"
	"github.com/velo-go/velo/internal/msgrx"
	"github.com/velo-go/velo/internal/rdma/rdmatest"
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

// BenchmarkGetPinned pulls a pinned slot between two nodes on loopback,
// chunked (the consumer has no RDMA path) and by GET over the in-process
// fake backend, whose GET is one memcpy: the rdma arm measures what the
// rendezvous adds around a GET (the acquire, the GET's goroutine, the
// pool buffer and its copy out), not a NIC.
func BenchmarkGetPinned(b *testing.B) {
	for _, arm := range []string{"chunked", "rdma"} {
		for _, size := range []int{1 << 20, 16 << 20} {
			b.Run(fmt.Sprintf("%s/%dMiB", arm, size>>20), func(b *testing.B) {
				owner, _, ob := rdmaNode(b, velo.RdmaRendezvousConfig{})
				var consumer *velo.Node
				if arm == "rdma" {
					var cb *rdmatest.Backend
					consumer, _, cb = rdmaNode(b, velo.RdmaRendezvousConfig{})
					cb.SetReachable(owner.WorkerID(), true)
				} else {
					consumer, _ = newNode(b)
				}
				introduce(b, owner, consumer)
				ob.SetReachable(consumer.WorkerID(), true)
				ctx := context.Background()
				h := owner.Rendezvous.RegisterDataPinned(pattern(size))
				b.SetBytes(int64(size))
				b.ReportAllocs()
				for b.Loop() {
					got, lease, err := consumer.Rendezvous.Get(ctx, h)
					if err != nil || len(got) != size {
						b.Fatalf("get: %d bytes, %v", len(got), err)
					}
					if err := consumer.Rendezvous.Detach(ctx, h, lease); err != nil {
						b.Fatal(err)
					}
				}
			})
		}
	}
}
