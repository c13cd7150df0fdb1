package metrics

import (
	"testing"

	"github.com/prometheus/client_golang/prometheus/testutil"
)

// The RDMA families are in a fresh registry's scrape with their label
// values at zero (registrations by kind, the chunked path decisions this
// build records), and ChunkedPath moves only its own series, with no
// allocation.
func TestRdmaFamiliesAndChunkedPath(t *testing.T) {
	reg, m := mustRegister(t)
	for _, name := range []string{
		"velo_rdma_registered_bytes", "velo_rdma_live_regions", "velo_rdma_registrations_total",
		"velo_rendezvous_rdma_path_total", "velo_rendezvous_rdma_get_duration_seconds",
		"velo_rendezvous_rdma_leases_reaped_total",
	} {
		if len(gather(t, reg, name)) == 0 {
			t.Errorf("%s: not in a fresh registry's scrape", name)
		}
	}
	for _, kind := range []string{"arena", "external"} {
		if _, ok := gather(t, reg, "velo_rdma_registrations_total")["kind="+kind]; !ok {
			t.Errorf("no velo_rdma_registrations_total{kind=%q}", kind)
		}
	}
	rv := m.Rendezvous()
	rv.ChunkedPath(RdmaNotConfigured)
	rv.ChunkedPath(RdmaNotConfigured)
	rv.ChunkedPath(RdmaNoOffer)
	rv.ChunkedPath(NumRdmaPathReasons) // out of range: ignored
	(*RendezvousMetrics)(nil).ChunkedPath(RdmaNoOffer)
	for reason, want := range map[string]float64{"not_configured": 2, "no_offer": 1} {
		if got := testutil.ToFloat64(m.rdma.path.WithLabelValues("chunked", reason)); got != want {
			t.Errorf("path_total{chunked,%s} = %v, want %v", reason, got, want)
		}
	}
	if n := testing.AllocsPerRun(100, func() { rv.ChunkedPath(RdmaNoOffer) }); n != 0 {
		t.Errorf("ChunkedPath: %v allocs, want 0", n)
	}
}
