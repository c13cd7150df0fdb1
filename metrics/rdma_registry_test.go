package metrics

import "testing"

// The registry's recording methods move their own series in a scrape,
// a nil handle records nothing, and a record allocates nothing.
func TestRdmaRegistryRecording(t *testing.T) {
	reg, m := mustRegister(t)
	rv := m.Rendezvous()
	rv.RdmaRegistration(RdmaRegArena)
	rv.RdmaRegistration(RdmaRegArena)
	rv.RdmaRegistration(RdmaRegExternal)
	rv.RdmaRegistration(numRdmaRegKinds) // out of range: ignored
	rv.RdmaRegisteredBytes(3 << 20)
	rv.RdmaLiveRegions(3)
	var nilRV *RendezvousMetrics
	nilRV.RdmaRegistration(RdmaRegArena)
	nilRV.RdmaRegisteredBytes(1)
	nilRV.RdmaLiveRegions(1)

	for _, c := range []struct {
		name, lv string
		want     float64
	}{
		{"velo_rdma_registrations_total", "arena", 2},
		{"velo_rdma_registrations_total", "external", 1},
		{"velo_rdma_registered_bytes", "", 3 << 20},
		{"velo_rdma_live_regions", "", 3},
	} {
		if got := gathered(t, reg, c.name, c.lv); got != c.want {
			t.Errorf("%s{%s} = %v, want %v", c.name, c.lv, got, c.want)
		}
	}
	if n := testing.AllocsPerRun(100, func() {
		rv.RdmaRegistration(RdmaRegExternal)
		rv.RdmaRegisteredBytes(1)
		rv.RdmaLiveRegions(1)
	}); n != 0 {
		t.Errorf("recording: %v allocs, want 0", n)
	}
	if RdmaRegArena.String() != "arena" || RdmaRegKind(9).String() != "unknown" {
		t.Error("kind names")
	}
}
