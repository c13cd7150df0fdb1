package metrics

import (
	"testing"
	"time"
)

// A node that never stages a payload shows only active_slots of the
// Rendezvous family; an operation binds its own label set and no other, and
// records into it without allocating after the first time.
func TestRendezvousBindsOnFirstUse(t *testing.T) {
	var nilM *VeloMetrics
	nilM.Rendezvous().Op(RvGet, true, time.Now()) // a nil handle records nothing
	reg, m := mustRegister(t)
	r := m.Rendezvous()
	if r == nil || m.Rendezvous() != r {
		t.Fatal("Rendezvous: want one non-nil handle per VeloMetrics")
	}
	lazy := []string{"velo_rendezvous_operations_total", "velo_rendezvous_operation_duration_seconds", "velo_rendezvous_bytes_total"}
	for _, name := range lazy {
		if got := len(gather(t, reg, name)); got != 0 {
			t.Errorf("%s: %d series before any record, want 0", name, got)
		}
	}
	if got := len(gather(t, reg, "velo_rendezvous_active_slots")); got != 1 {
		t.Errorf("active_slots: %d series, want 1", got)
	}
	start := time.Now()
	for name, f := range map[string]func(){
		"Op":    func() { r.Op(RvPull, true, start) },
		"Bytes": func() { r.Bytes(RvPull, 10) },
	} {
		if n := testing.AllocsPerRun(100, f); n != 0 {
			t.Errorf("%s: %v allocations per record after the first, want 0", name, n)
		}
	}
	for _, name := range lazy {
		if got := len(gather(t, reg, name)); got != 1 {
			t.Errorf("%s: %d series after records into one label set, want 1", name, got)
		}
	}
	if v := gather(t, reg, "velo_rendezvous_operations_total")["operation=pull,outcome=success"].GetCounter().GetValue(); v != 101 {
		t.Errorf("pull operations = %v, want 101", v)
	}
	if v := gather(t, reg, "velo_rendezvous_bytes_total")["operation=pull"].GetCounter().GetValue(); v != 1010 {
		t.Errorf("pull bytes = %v, want 1010", v)
	}
}
