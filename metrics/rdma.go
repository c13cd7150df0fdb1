package metrics

import "github.com/prometheus/client_golang/prometheus"

// The RDMA families of the Rendezvous and RDMA chapter. They move on a
// node built with an RDMA backend (velo.WithRDMA, the UCX transport under
// build tag ucx); on any other node they stay at zero, and are registered
// anyway so that dashboards and alerts written for the reference find
// them. Every node makes the path decision, so
// velo_rendezvous_rdma_path_total always moves, with the reason each side
// records (see RendezvousMetrics.PathDecision); the GET's duration and the
// reaped leases are recorded by RdmaGetDuration and LeasesReaped.

// RdmaPathReason is the reason label of velo_rendezvous_rdma_path_total:
// the book's reasons, as the owner and the consumer record them (see
// RendezvousMetrics.PathDecision). RdmaOK is the only reason of
// path="rdma"; every other reason is path="chunked".
type RdmaPathReason uint8

const (
	// RdmaNoOffer: the owner answered an acquire that carried no RDMA
	// offer, or one naming a backend it does not serve; or the consumer
	// made none because the owner is not on an RDMA-capable transport.
	RdmaNoOffer RdmaPathReason = iota
	// RdmaNotConfigured: this side has no RDMA registry.
	RdmaNotConfigured
	// RdmaKillSwitch: the RDMA path is switched off on this side.
	RdmaKillSwitch
	// RdmaNotPinned: the slot is not in registered memory, or its
	// staging is gone and no descriptor encodes.
	RdmaNotPinned
	// RdmaBelowMin: the payload is under rdma_min_bytes.
	RdmaBelowMin
	// RdmaDraining: the owner is draining.
	RdmaDraining
	// RdmaDecodeError: the consumer refused the owner's descriptor.
	RdmaDecodeError
	// RdmaPoolExhausted: no registered memory (a staging or a GET
	// destination) was to be had.
	RdmaPoolExhausted
	// RdmaGetFailed: the GET failed.
	RdmaGetFailed
	// RdmaBudget: the registered-bytes budget is spent (staging).
	RdmaBudget
	// RdmaOK: path="rdma" (the owner sent a descriptor; the consumer's
	// GET completed).
	RdmaOK
	NumRdmaPathReasons
)

var rdmaPathReasonNames = [NumRdmaPathReasons]string{
	"no_offer", "not_configured", "kill_switch", "not_pinned", "below_min", "draining",
	"decode_error", "pool_exhausted", "get_failed", "budget", "ok",
}

// numEagerReasons: the reasons every node records (no_offer,
// not_configured) exist at zero from the start; the rest bind on first use.
const numEagerReasons = 2

func (r RdmaPathReason) String() string {
	if r < NumRdmaPathReasons {
		return rdmaPathReasonNames[r]
	}
	return "unknown"
}

// Path is the path label a reason belongs to.
func (r RdmaPathReason) Path() string {
	if r == RdmaOK {
		return "rdma"
	}
	return "chunked"
}

// rdmaFamilies are the six RDMA families.
type rdmaFamilies struct {
	registeredBytes prometheus.Gauge
	registrations   *prometheus.CounterVec // kind: arena, external
	liveRegions     prometheus.Gauge
	path            *prometheus.CounterVec // path, reason
	getDuration     prometheus.Histogram
	leasesReaped    prometheus.Counter
	eager           [numEagerReasons]prometheus.Counter // path="chunked", bound at Register
}

func newRdmaFamilies() rdmaFamilies {
	f := rdmaFamilies{
		registeredBytes: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "velo_rdma_registered_bytes",
			Help: "Bytes currently registered for RDMA (arena pool plus external regions). 0 without an RDMA backend.",
		}),
		registrations: counterVec("velo_rdma_registrations_total",
			"RDMA memory registrations performed by Velo. 0 without an RDMA backend.", "kind"),
		liveRegions: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "velo_rdma_live_regions",
			Help: "Memory regions the RDMA backend currently holds registered. 0 without an RDMA backend.",
		}),
		path: counterVec("velo_rendezvous_rdma_path_total",
			"Rendezvous path decisions, by the path chosen and the reason. Owner and consumer both record, so one transfer can count more than once.",
			"path", "reason"),
		getDuration: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "velo_rendezvous_rdma_get_duration_seconds",
			Help:    "Duration of the completed RDMA GETs inside rendezvous gets, excluding the acquire round trip. Empty without an RDMA backend.",
			Buckets: latencyBuckets,
		}),
		leasesReaped: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "velo_rendezvous_rdma_leases_reaped_total",
			Help: "RDMA leases force-released by the owner-side reaper after their deadline passed. 0 without an RDMA backend.",
		}),
	}
	// The two kinds, and the path decisions this build records, exist at
	// zero, so the families show in a scrape with their labels before
	// anything records.
	f.registrations.WithLabelValues("arena")
	f.registrations.WithLabelValues("external")
	for i := range f.eager {
		r := RdmaPathReason(i)
		f.eager[i] = f.path.WithLabelValues(r.Path(), r.String())
	}
	return f
}

func (f *rdmaFamilies) collectors() []prometheus.Collector {
	return []prometheus.Collector{f.registeredBytes, f.registrations, f.liveRegions, f.path, f.getDuration, f.leasesReaped}
}
