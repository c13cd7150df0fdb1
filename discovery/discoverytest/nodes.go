package discoverytest

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/velo-go/velo"
	"github.com/velo-go/velo/ext"
	"github.com/velo-go/velo/internal/msgrx"
	"github.com/velo-go/velo/transport/tcp"
)

// StartNode starts a velo node over TCP with d as its discovery. It
// answers "whoami" with its instance id. The node is shut down at cleanup.
func StartNode(t *testing.T, d ext.PeerDiscovery) *velo.Node {
	t.Helper()
	tr, err := tcp.New()
	if err != nil {
		t.Fatal(err)
	}
	n, err := velo.New(ctxT(t), velo.WithTransport(tr), velo.WithDiscovery(d))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		n.Shutdown(ctx)
	})
	id := n.InstanceID().String()
	err = n.Register(velo.UnaryHandler("whoami", func(*velo.Context) ([]byte, error) { return []byte(id), nil }))
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// RunNodes starts three nodes, each with its own client of the backend,
// and has every node call every other one by instance id and resolve it by
// worker id, with no peer registered by hand. A call to an instance that
// nothing knows fails with an error matching both ErrPeerNotRegistered and
// ext.ErrPeerNotFound.
func RunNodes(t *testing.T, open PeerOpener) {
	nodes := make([]*velo.Node, 3)
	for i := range nodes {
		nodes[i] = StartNode(t, open(t))
	}
	ctx := ctxT(t)
	for _, a := range nodes {
		for _, b := range nodes {
			if a == b {
				continue
			}
			got, err := a.Unary(ctx, b.InstanceID(), "whoami", nil)
			if err != nil || string(got) != b.InstanceID().String() {
				t.Fatalf("%s → %s: %q, %v", a.InstanceID(), b.InstanceID(), got, err)
			}
			id, err := msgrx.ResolveWorker(a.Messenger(), ctx, b.PeerInfo().WorkerID())
			if err != nil || id != b.InstanceID() {
				t.Fatalf("resolve worker of %s: %s, %v", b.InstanceID(), id, err)
			}
		}
	}
	_, err := nodes[0].Unary(ctx, ext.NewInstanceID(), "whoami", nil)
	if !errors.Is(err, velo.ErrPeerNotRegistered) || !errors.Is(err, ext.ErrPeerNotFound) {
		t.Fatalf("call to an unknown instance: %v", err)
	}
	t.Logf("3 nodes found each other through discovery; unknown instance: %v", err)
}

// MeasureVanish runs kill, then asks d until info is no longer found; it
// returns how long that took. It fails the test after limit. Only a
// definite "not found" counts: a lookup that timed out (a request that
// reached the dying peer) is asked again.
func MeasureVanish(t *testing.T, d ext.PeerDiscovery, info ext.PeerInfo, kill func(), limit time.Duration) time.Duration {
	t.Helper()
	MustFind(t, d, info)
	start := time.Now()
	kill()
	for time.Since(start) < limit {
		ctx, cancel := context.WithTimeout(context.Background(), 25*time.Millisecond)
		_, err := d.DiscoverInstance(ctx, info.InstanceID)
		cancel()
		if errors.Is(err, ext.ErrPeerNotFound) && !errors.Is(err, context.DeadlineExceeded) {
			return time.Since(start)
		}
		time.Sleep(10 * time.Millisecond)
	}
	t.Fatalf("%s still found %v after the kill", info.InstanceID, limit)
	return 0
}
