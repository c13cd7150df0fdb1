package bench

import "testing"

// A small run of three producer counts reports items/s and CPU per item
// for each, with every item and every Detached read.
func TestMPSCFaninSmallRun(t *testing.T) {
	var r Report
	cfg := MPSCFaninConfig{Producers: []int{1, 4, 16}, Items: 4000, Payload: 16, Capacity: 64, Reps: 2}
	if err := MPSCFanin(cfg, &r); err != nil {
		t.Fatal(err)
	}
	if len(r.Figures) != 6 {
		t.Fatalf("%d figures, want 6", len(r.Figures))
	}
	for _, f := range r.Figures {
		if len(f.Samples) != 2 || f.Min() <= 0 {
			t.Fatalf("%s %s: %v", f.Arm, f.Metric, f.Samples)
		}
	}
	if err := (MPSCFaninConfig{Producers: []int{0}, Items: 1, Capacity: 1, Reps: 1}).Validate(); err == nil {
		t.Fatal("zero producers accepted")
	}
}
