//go:build ucx

package velo_test

import (
	"bytes"
	"context"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/velo-go/velo"
	"github.com/velo-go/velo/metrics"
	"github.com/velo-go/velo/transport/tcp"
	"github.com/velo-go/velo/transport/ucx"
)

// Over real UCX (UCX_TLS=tcp in CI, or sm,self, where the transport makes
// its endpoints without the peer error handling UCX 1.13 lacks there): a
// pinned slot moves by one GET between two nodes with TCP for the control
// plane, and the path metric says so on both sides.
func TestRDMAOverUCX(t *testing.T) {
	node := func() (*velo.Node, *prometheus.Registry) {
		tr, err := tcp.New()
		if err != nil {
			t.Fatal(err)
		}
		u, err := ucx.New(ucx.WithTLS("tcp"))
		if err != nil {
			t.Fatal(err)
		}
		reg := prometheus.NewRegistry()
		met, err := metrics.Register(reg)
		if err != nil {
			t.Fatal(err)
		}
		n := startRDMA(t, velo.WithTransport(tr), velo.WithMetrics(met),
			velo.WithRDMA(u, velo.RdmaConfig{Pool: velo.RdmaPoolConfig{InitialArenaBytes: 16 << 20}}))
		return n, reg
	}
	owner, om := node()
	consumer, cm := node()
	if err := consumer.RegisterPeer(owner.PeerInfo()); err != nil {
		t.Fatal(err)
	}
	if err := owner.RegisterPeer(consumer.PeerInfo()); err != nil {
		t.Fatal(err)
	}
	want := bytes.Repeat([]byte("0123456789abcdef"), 8<<20/16)
	h := owner.Rendezvous.RegisterDataPinned(want)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	got, lease, err := consumer.Rendezvous.Get(ctx, h)
	if err != nil || !bytes.Equal(got, want) {
		t.Fatalf("get: %d bytes, %v", len(got), err)
	}
	_ = consumer.Rendezvous.Release(ctx, h, lease)
	for side, reg := range map[string]*prometheus.Registry{"owner": om, "consumer": cm} {
		if v := counter(reg, "velo_rendezvous_rdma_path_total", map[string]string{"path": "rdma", "reason": "ok"}); v != 1 {
			t.Errorf("%s: rdma/ok = %v, want 1", side, v)
		}
	}
}

func counter(reg *prometheus.Registry, family string, labels map[string]string) float64 {
	fams, _ := reg.Gather()
	for _, f := range fams {
		if f.GetName() != family {
			continue
		}
	next:
		for _, m := range f.GetMetric() {
			for _, l := range m.GetLabel() {
				if labels[l.GetName()] != l.GetValue() {
					continue next
				}
			}
			return m.GetCounter().GetValue()
		}
	}
	return 0
}
