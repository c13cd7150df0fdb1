package velo_test

import (
	"context"
	"os"
	"testing"
	"time"

	"github.com/velo-go/velo"
	"github.com/velo-go/velo/ext"
	"github.com/velo-go/velo/streaming"
	"github.com/velo-go/velo/transport/tcp"
)

// manyPeers registers n peers that are never dialled (a send would find
// nobody; the view only reads the table).
func manyPeers(t testing.TB, n *velo.Node, count int) {
	t.Helper()
	addr := n.PeerInfo().Address
	for range count {
		info := ext.PeerInfo{InstanceID: ext.NewInstanceID(), Address: ext.WorkerAddress{}}
		for k, v := range addr {
			info.Address[k] = v // the node's own endpoints: a registration, never a dial here
		}
		if err := n.RegisterPeer(info); err != nil {
			t.Fatal(err)
		}
	}
}

func anchors(t testing.TB, n *velo.Node, count int) []*streaming.Anchor[string] {
	t.Helper()
	out := make([]*streaming.Anchor[string], count)
	for i := range out {
		a, err := streaming.CreateAnchor[string](n.Streams)
		if err != nil {
			t.Fatal(err)
		}
		out[i] = a
	}
	return out
}

// TestSnapshotCostIsBounded: with thousands of anchors the snapshot lists
// only OldestAnchorsListed of them, and what it allocates does not grow
// with the anchors (the walk reuses its buffers and the sightings' maps):
// 4,900 more anchors cost fewer than 100 more allocations (the shard
// buffer's growth), not one or more each.
func TestSnapshotCostIsBounded(t *testing.T) {
	n := node(t)
	manyPeers(t, n, 200)
	if s := n.Snapshot(); len(s.Peers) != 201 || !s.Peers[0].Self || s.Peers[0].Instance != n.InstanceID().String() {
		t.Fatalf("%d peers in the view, want 200 and the node itself first", len(s.Peers))
	}
	few := anchors(t, n, 100)
	n.Snapshot() // the sightings' maps reach their size
	allocsFew := testing.AllocsPerRun(5, func() { n.Snapshot() })
	many := anchors(t, n, 4900)
	n.Snapshot()
	allocsMany := testing.AllocsPerRun(5, func() { n.Snapshot() })
	s := n.Snapshot()
	if s.Anchors.Total != 5000 || s.Anchors.ByPhase["unattached"] != 5000 || len(s.Anchors.Oldest) != velo.OldestAnchorsListed {
		t.Fatalf("anchors: total %d, %v, %d listed", s.Anchors.Total, s.Anchors.ByPhase, len(s.Anchors.Oldest))
	}
	for i := 1; i < len(s.Anchors.Oldest); i++ {
		if s.Anchors.Oldest[i].AgeSeconds > s.Anchors.Oldest[i-1].AgeSeconds {
			t.Fatalf("oldest not in order of age: %+v", s.Anchors.Oldest)
		}
	}
	t.Logf("allocations per snapshot (200 peers): %.0f with 100 anchors, %.0f with 5,000", allocsFew, allocsMany)
	if allocsMany > allocsFew+100 {
		t.Fatalf("a snapshot's allocations grow with the anchors: %.0f with 100, %.0f with 5,000", allocsFew, allocsMany)
	}
	for _, a := range append(few, many...) {
		a.Close()
	}
}

// BenchmarkSnapshot: one snapshot of a node with 200 peers and 5,000
// anchors.
func BenchmarkSnapshot(b *testing.B) {
	n := benchNode(b)
	if os.Getenv("VELO_BENCH_NO_PEERS") == "" {
		manyPeers(b, n, 200)
	}
	anchors(b, n, 5000)
	n.Snapshot()
	b.ReportAllocs()
	for b.Loop() {
		n.Snapshot()
	}
}

func benchNode(b *testing.B) *velo.Node {
	tr, err := tcp.New()
	if err != nil {
		b.Fatal(err)
	}
	n, err := velo.New(context.Background(), velo.WithTransport(tr))
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { shutdownWithin(n, 5*time.Second) })
	return n
}
