package metrics

import "github.com/prometheus/client_golang/prometheus"

// The registration families of the RDMA registry (velo_rdma_registered_bytes,
// velo_rdma_registrations_total, velo_rdma_live_regions), recorded by
// package internal/rdma as it maps and unmaps memory.

// RdmaRegKind is the kind label of velo_rdma_registrations_total.
type RdmaRegKind uint8

const (
	// RdmaRegArena: an arena of the registry's pool.
	RdmaRegArena RdmaRegKind = iota
	// RdmaRegExternal: memory the caller registered.
	RdmaRegExternal
	numRdmaRegKinds
)

var rdmaRegKindNames = [numRdmaRegKinds]string{"arena", "external"}

func (k RdmaRegKind) String() string {
	if k < numRdmaRegKinds {
		return rdmaRegKindNames[k]
	}
	return "unknown"
}

// rdmaRegSeries are the registration series, bound once.
type rdmaRegSeries struct {
	bytes prometheus.Gauge
	live  prometheus.Gauge
	regs  [numRdmaRegKinds]prometheus.Counter
}

func newRdmaRegSeries(f *rdmaFamilies) *rdmaRegSeries {
	s := &rdmaRegSeries{bytes: f.registeredBytes, live: f.liveRegions}
	for k := range s.regs {
		s.regs[k] = f.registrations.WithLabelValues(RdmaRegKind(k).String())
	}
	return s
}

// RdmaRegisteredBytes sets velo_rdma_registered_bytes: the bytes the
// registry holds mapped, arenas and external regions, in whole pages.
func (r *RendezvousMetrics) RdmaRegisteredBytes(n int64) {
	if r != nil && r.reg != nil {
		r.reg.bytes.Set(float64(n))
	}
}

// RdmaRegistration counts one successful registration of kind.
func (r *RendezvousMetrics) RdmaRegistration(kind RdmaRegKind) {
	if r != nil && r.reg != nil && kind < numRdmaRegKinds {
		r.reg.regs[kind].Inc()
	}
}

// RdmaLiveRegions sets velo_rdma_live_regions: the registrations the
// backend holds now (arenas and external regions).
func (r *RendezvousMetrics) RdmaLiveRegions(n int) {
	if r != nil && r.reg != nil {
		r.reg.live.Set(float64(n))
	}
}
