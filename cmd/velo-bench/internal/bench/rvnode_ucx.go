//go:build ucx

package bench

import (
	"context"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/velo-go/velo"
	"github.com/velo-go/velo/metrics"
	"github.com/velo-go/velo/transport/ucx"
)

// ucxBuilt reports whether this build has UCX.
const ucxBuilt = true

// rvNode builds a node as the book deploys the RDMA path: TCP for the
// control plane and UCX beside it, with an RDMA registry whose
// rdma_min_bytes is minBytes. UCX_TLS and UCX_NET_DEVICES come from the
// environment. reg, when not nil, gets the node's metrics. alloc makes
// the arenas memory UCX allocates (ucx.WithAllocatedArenas).
func rvNode(ctx context.Context, reg *prometheus.Registry, minBytes int, alloc bool) (*velo.Node, error) {
	tcp, err := NewTransport("tcp")
	if err != nil {
		return nil, err
	}
	var uopts []ucx.Option // over shared memory only, ucx.New turns peer errors off itself
	if alloc {
		uopts = append(uopts, ucx.WithAllocatedArenas())
	}
	u, err := ucx.New(uopts...)
	if err != nil {
		return nil, err
	}
	opts := []velo.Option{
		velo.WithTransport(tcp),
		velo.WithRDMA(u, velo.RdmaConfig{Rendezvous: velo.RdmaRendezvousConfig{MinBytes: int64(minBytes)}}),
	}
	if reg != nil {
		m, err := metrics.Register(reg)
		if err != nil {
			return nil, err
		}
		opts = append(opts, velo.WithMetrics(m))
	}
	return velo.New(ctx, opts...)
}
