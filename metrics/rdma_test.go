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

// Every reason lands on its own series with the book's label values:
// path="rdma" for ok only, path="chunked" for the rest, and a reason that
// binds lazily is a zero-allocation add after its first record.
func TestRdmaPathDecisionLabels(t *testing.T) {
	_, m := mustRegister(t)
	rv := m.Rendezvous()
	want := map[RdmaPathReason][2]string{
		RdmaNoOffer: {"chunked", "no_offer"}, RdmaNotConfigured: {"chunked", "not_configured"},
		RdmaKillSwitch: {"chunked", "kill_switch"}, RdmaNotPinned: {"chunked", "not_pinned"},
		RdmaBelowMin: {"chunked", "below_min"}, RdmaDraining: {"chunked", "draining"},
		RdmaDecodeError: {"chunked", "decode_error"}, RdmaPoolExhausted: {"chunked", "pool_exhausted"},
		RdmaGetFailed: {"chunked", "get_failed"}, RdmaBudget: {"chunked", "budget"},
		RdmaOK: {"rdma", "ok"},
	}
	if len(want) != int(NumRdmaPathReasons) {
		t.Fatalf("table has %d reasons, the type %d", len(want), NumRdmaPathReasons)
	}
	for why, lv := range want {
		for i := 0; i <= int(why); i++ {
			rv.PathDecision(why)
		}
		if got := testutil.ToFloat64(m.rdma.path.WithLabelValues(lv[0], lv[1])); got != float64(why)+1 {
			t.Errorf("%s: path_total{%s,%s} = %v, want %v", why, lv[0], lv[1], got, float64(why)+1)
		}
	}
	rv.ChunkedPath(RdmaOK) // not a chunked reason: ignored
	if got := testutil.ToFloat64(m.rdma.path.WithLabelValues("rdma", "ok")); got != float64(RdmaOK)+1 {
		t.Errorf("ChunkedPath(RdmaOK) moved path_total{rdma,ok} to %v", got)
	}
	if got := testutil.ToFloat64(m.rdma.path.WithLabelValues("chunked", "ok")); got != 0 {
		t.Errorf("path_total{chunked,ok} = %v, want 0", got)
	}
	if n := testing.AllocsPerRun(100, func() { rv.PathDecision(RdmaGetFailed) }); n != 0 {
		t.Errorf("PathDecision(lazy): %v allocs, want 0", n)
	}
}
