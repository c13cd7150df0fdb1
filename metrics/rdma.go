package metrics

import "github.com/prometheus/client_golang/prometheus"

// The RDMA families of the Rendezvous and RDMA chapter. This build has no
// RDMA backend (the UCX transport is not ported), so nothing registers
// memory, answers an acquire with a descriptor or runs a GET: the
// registration gauges, velo_rdma_registrations_total,
// velo_rendezvous_rdma_get_duration_seconds and
// velo_rendezvous_rdma_leases_reaped_total stay at zero. They are
// registered so that dashboards and alerts written for the reference find
// them. The one decision this build does make is the path: every transfer
// takes the chunked path, and velo_rendezvous_rdma_path_total says so, with
// the reason each side records (see RendezvousMetrics.ChunkedPath).

// RdmaPathReason is the reason label of velo_rendezvous_rdma_path_total
// for path="chunked" that this build can record.
type RdmaPathReason uint8

const (
	// RdmaNoOffer: the owner answered an acquire that carried no RDMA
	// offer (the acquire body this build speaks has no offer field).
	RdmaNoOffer RdmaPathReason = iota
	// RdmaNotConfigured: the consumer has no RDMA registry, so it sent no
	// offer.
	RdmaNotConfigured
	NumRdmaPathReasons
)

var rdmaPathReasonNames = [NumRdmaPathReasons]string{"no_offer", "not_configured"}

// rdmaFamilies are the six RDMA families.
type rdmaFamilies struct {
	registeredBytes prometheus.Gauge
	registrations   *prometheus.CounterVec // kind: arena, external
	liveRegions     prometheus.Gauge
	path            *prometheus.CounterVec // path, reason
	getDuration     prometheus.Histogram
	leasesReaped    prometheus.Counter
	chunked         [NumRdmaPathReasons]prometheus.Counter // path="chunked", bound at Register
}

func newRdmaFamilies() rdmaFamilies {
	f := rdmaFamilies{
		registeredBytes: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "velo_rdma_registered_bytes",
			Help: "Bytes currently registered for RDMA (arena pool plus external regions). Always 0 in this build: no RDMA backend.",
		}),
		registrations: counterVec("velo_rdma_registrations_total",
			"RDMA memory registrations performed by Velo. Always 0 in this build: no RDMA backend.", "kind"),
		liveRegions: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "velo_rdma_live_regions",
			Help: "Memory regions the RDMA backend currently holds registered. Always 0 in this build: no RDMA backend.",
		}),
		path: counterVec("velo_rendezvous_rdma_path_total",
			"Rendezvous path decisions, by the path chosen and the reason. Owner and consumer both record, so one transfer can count more than once.",
			"path", "reason"),
		getDuration: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "velo_rendezvous_rdma_get_duration_seconds",
			Help:    "Duration of the RDMA GET inside a rendezvous get, excluding the acquire round trip. Empty in this build: no RDMA backend.",
			Buckets: latencyBuckets,
		}),
		leasesReaped: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "velo_rendezvous_rdma_leases_reaped_total",
			Help: "RDMA leases force-released by the owner-side reaper after their deadline passed. Always 0 in this build: no RDMA backend.",
		}),
	}
	// The two kinds, and the path decisions this build records, exist at
	// zero, so the families show in a scrape with their labels before
	// anything records.
	f.registrations.WithLabelValues("arena")
	f.registrations.WithLabelValues("external")
	for i, r := range rdmaPathReasonNames {
		f.chunked[i] = f.path.WithLabelValues("chunked", r)
	}
	return f
}

func (f *rdmaFamilies) collectors() []prometheus.Collector {
	return []prometheus.Collector{f.registeredBytes, f.registrations, f.liveRegions, f.path, f.getDuration, f.leasesReaped}
}
