package metrics

import "time"

// RdmaGetDuration observes one completed RDMA GET of a rendezvous get,
// from its start to the backend's answer: the acquire round trip is not
// in it. A GET that failed is not observed; its fallback is counted in
// velo_rendezvous_rdma_path_total as get_failed.
func (r *RendezvousMetrics) RdmaGetDuration(d time.Duration) {
	if r != nil && r.rdma != nil {
		r.rdma.getDuration.Observe(d.Seconds())
	}
}

// LeasesReaped counts n RDMA leases the owner's reaper force-released:
// their consumer sent no renewal within the lease timeout.
func (r *RendezvousMetrics) LeasesReaped(n int) {
	if r != nil && r.rdma != nil && n > 0 {
		r.rdma.leasesReaped.Add(float64(n))
	}
}
