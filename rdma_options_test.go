package velo_test

import (
	"bytes"
	"context"
	"errors"
	"testing"
	"time"

	"github.com/velo-go/velo"
	"github.com/velo-go/velo/internal/rdma"
	"github.com/velo-go/velo/internal/rdma/rdmatest"
	"github.com/velo-go/velo/transport/tcp"
)

// tcpRDMA is a transport with an RDMA backend, as the UCX transport is:
// TCP for the messages, the fake for the GETs.
type tcpRDMA struct {
	*tcp.Transport
	be *rdmatest.Backend
}

func (t tcpRDMA) RDMA() rdma.Backend { return t.be }

func newTCPRDMA(t *testing.T) tcpRDMA {
	t.Helper()
	tr, err := tcp.New()
	if err != nil {
		t.Fatal(err)
	}
	return tcpRDMA{tr, rdmatest.New()}
}

func startRDMA(t *testing.T, opts ...velo.Option) *velo.Node {
	t.Helper()
	n, err := velo.New(context.Background(), opts...)
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

// WithRDMA adds a transport that is also an ext.Transport, once, whether
// or not WithTransport named it too; the two nodes then move a pinned
// slot by GET, and Shutdown lets the registered memory go.
func TestWithRDMAAddsItsTransportOnce(t *testing.T) {
	a, b := newTCPRDMA(t), newTCPRDMA(t)
	owner := startRDMA(t, velo.WithRDMA(a, velo.RdmaConfig{Pool: velo.RdmaPoolConfig{InitialArenaBytes: 4 << 20}}))
	consumer := startRDMA(t, velo.WithTransport(b), velo.WithRDMA(b, velo.RdmaConfig{}))
	plain := startRDMA(t, velo.WithTransport(newTCPRDMA(t)))
	for _, n := range []*velo.Node{owner, consumer} {
		if got, want := len(n.PeerInfo().Address), len(plain.PeerInfo().Address); got != want {
			t.Fatalf("%d address entries, a node with one TCP transport has %d: %v", got, want, n.PeerInfo().Address)
		}
	}
	if err := consumer.RegisterPeer(owner.PeerInfo()); err != nil {
		t.Fatal(err)
	}
	if err := owner.RegisterPeer(consumer.PeerInfo()); err != nil {
		t.Fatal(err)
	}
	b.be.SetReachable(owner.WorkerID(), true)
	want := bytes.Repeat([]byte("rdma"), 1<<18)
	h := owner.Rendezvous.RegisterDataPinned(want)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	got, _, err := consumer.Rendezvous.Get(ctx, h)
	if err != nil || !bytes.Equal(got, want) || b.be.Gets() != 1 {
		t.Fatalf("get: %d bytes, %v, %d GETs", len(got), err, b.be.Gets())
	}
	if a.be.LiveMappings() == 0 {
		t.Fatal("the owner mapped nothing")
	}
	if err := owner.Shutdown(ctx); err != nil {
		t.Fatal(err)
	}
	if n := a.be.LiveMappings(); n != 0 {
		t.Fatalf("%d mappings live after Shutdown", n)
	}
}

func TestWithRDMARefusals(t *testing.T) {
	tr := newTCPRDMA(t)
	if _, err := velo.New(context.Background(), velo.WithRDMA(tr, velo.RdmaConfig{}), velo.WithRDMA(tr, velo.RdmaConfig{})); err == nil {
		t.Error("WithRDMA twice was taken")
	}
	if _, err := velo.New(context.Background(), velo.WithRDMA(nil, velo.RdmaConfig{})); err == nil {
		t.Error("WithRDMA(nil) was taken")
	}
	bad := velo.RdmaConfig{Rendezvous: velo.RdmaRendezvousConfig{LeaseTimeout: -1}}
	if _, err := velo.New(context.Background(), velo.WithTransport(tr), velo.WithRDMA(tr, bad)); err == nil {
		t.Error("a negative lease timeout was taken")
	}
	// Without WithRDMA the RDMA-only calls say so.
	n := startRDMA(t, velo.WithTransport(newTCPRDMA(t)))
	if _, err := n.Rendezvous.RegisterOwned(make([]byte, 10)); !errors.Is(err, velo.ErrRdmaNotConfigured) {
		t.Errorf("RegisterOwned without RDMA: %v", err)
	}
}
