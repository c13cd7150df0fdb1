package velo

import (
	"context"
	"errors"
	"slices"
	"time"

	"github.com/velo-go/velo/ext"
	"github.com/velo-go/velo/internal/rdma"
	"github.com/velo-go/velo/messenger"
	"github.com/velo-go/velo/metrics"
	"github.com/velo-go/velo/rendezvous"
)

// RDMATransport is a transport that can read a peer's memory with a
// one-sided GET: the UCX transport ((*ucx.Transport).RDMA, built with the
// build tag ucx). Only this module implements it.
type RDMATransport interface {
	// RDMA is the transport's RDMA backend: it registers memory and runs
	// the GETs of the rendezvous RDMA path.
	RDMA() rdma.Backend
}

// RdmaPoolConfig sizes the pool of registered memory (arenas) and caps
// what the node registers; zero fields take the defaults (a first arena of
// 64 MiB, arenas up to 1 GiB, requests of 64 MiB and more in an arena of
// their own, a registered-bytes budget of 1 GiB, empty arenas kept).
type RdmaPoolConfig = rdma.PoolConfig

// RdmaRendezvousConfig tunes the RDMA path of rendezvous (MinBytes,
// Disabled, LeaseTimeout); see rendezvous.RdmaRendezvousConfig.
type RdmaRendezvousConfig = rendezvous.RdmaRendezvousConfig

// RdmaConfig configures WithRDMA. Zero fields take the defaults.
type RdmaConfig struct {
	Rendezvous RdmaRendezvousConfig
	Pool       RdmaPoolConfig
	// ShutdownTimeout bounds the registry's sweep at Shutdown when ctx has
	// no deadline (default 30 s).
	ShutdownTimeout time.Duration
	// DropDeregTimeout bounds the deregistration that a dropped region
	// guard starts in the background (default 30 s).
	DropDeregTimeout time.Duration
}

// rdmaOption is what WithRDMA carries to New.
type rdmaOption struct {
	t   RDMATransport
	cfg RdmaConfig
}

// WithRDMA turns on the RDMA path of rendezvous over t: New builds the
// node's registry of RDMA memory over t's backend, and the rendezvous
// manager uses it. An owner then answers a pinned slot's acquire
// (Rendezvous.RegisterDataPinned) with a descriptor, and a consumer reads
// it with one GET, falling back to chunks once when the GET fails. When t
// is also an ext.Transport, New adds it as one (if WithTransport did not
// already); keep a TCP transport beside it for the control plane.
//
// The environment variable VELO_RDMA_RENDEZVOUS_DISABLE (1, true, yes or
// on) turns the path off on both roles, as RdmaRendezvousConfig.Disabled
// does; New reads it once. See docs/rendezvous.md.
func WithRDMA(t RDMATransport, cfg RdmaConfig) Option {
	return Option{rdma: &rdmaOption{t: t, cfg: cfg}}
}

// errRDMATwice: WithRDMA may be given once.
var errRDMATwice = errors.New("velo: WithRDMA given more than once")

// applyRDMA checks the RDMA option and adds its transport. It runs before
// the messenger is built.
func applyRDMA(o *rdmaOption, cfg *messenger.Config) error {
	if o.t == nil {
		return errors.New("velo: WithRDMA needs a transport")
	}
	if tr, ok := o.t.(ext.Transport); ok && !slices.Contains(cfg.Transports, tr) {
		cfg.Transports = append(cfg.Transports, tr)
	}
	if o.t.RDMA() == nil {
		return errors.New("velo: the WithRDMA transport has no RDMA backend")
	}
	return nil
}

// newRegistry builds the node's RDMA registry for the rendezvous config.
func newRegistry(o *rdmaOption, met *metrics.VeloMetrics, rvc *rendezvous.Config) *rdma.Registry {
	reg := rdma.NewRegistry(o.t.RDMA(), rdma.Config{
		Pool: o.cfg.Pool, ShutdownTimeout: o.cfg.ShutdownTimeout, DropDeregTimeout: o.cfg.DropDeregTimeout,
	}, met.Rendezvous())
	rvc.Registry, rvc.RDMA = reg, o.cfg.Rendezvous
	return reg
}

// shutdownRDMA is the RDMA half of Shutdown, before the messenger's
// teardown and under the same ctx: a GET is invisible to the owner's
// in-flight counts, so registered memory must be let go while the
// transports still run. New requests are refused first (the messenger's
// gate) and acquires answer chunked (draining); pinned slots are copied to
// plain memory, so chunked pulls already admitted finish; then the
// registry gates new registrations, drains those in progress and unmaps
// everything. A peer mid-GET holds a descriptor for the old memory: its
// GET fails, and it falls back to the chunked path.
func (n *Node) shutdownRDMA(ctx context.Context) {
	n.m.BeginDrain()
	n.Rendezvous.DemotePinned()
	if err := n.rdmaReg.Shutdown(ctx); err != nil {
		n.rdmaLog.Warn("velo: the RDMA registry's shutdown sweep did not drain", "err", err)
	}
}

// ErrRdmaNotConfigured: an RDMA-only call (RegisterDataInRegion,
// RegisterExternalMemory, RegisterOwned) on a node built without WithRDMA.
var ErrRdmaNotConfigured = rendezvous.ErrRdmaNotConfigured
