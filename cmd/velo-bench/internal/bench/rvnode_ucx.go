//go:build ucx

package bench

import (
	"context"
	"os"
	"strings"

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
	var uopts []ucx.Option
	if sharedMemoryOnly(os.Getenv("UCX_TLS")) {
		// UCX 1.13's shared-memory transports have no peer error
		// handling, so endpoints over them exist only without it; the
		// TCP control plane still sees a dead peer.
		uopts = append(uopts, ucx.WithoutPeerErrors())
	}
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

// sharedMemoryOnly reports whether a UCX_TLS list names only UCX's
// shared-memory and loopback transports.
func sharedMemoryOnly(tls string) bool {
	if tls == "" {
		return false
	}
	for _, t := range strings.Split(tls, ",") {
		switch strings.TrimPrefix(strings.TrimSpace(t), "^") {
		case "sm", "shm", "self", "cma", "posix", "sysv", "knem", "xpmem":
		default:
			return false
		}
	}
	return true
}
