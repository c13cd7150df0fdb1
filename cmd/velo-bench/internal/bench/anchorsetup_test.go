package bench

import "testing"

// A small run of both arms reports every figure, and the unattached arm
// adds one goroutine (the Manager's sweeper), however many anchors it holds.
func TestAnchorSetupSmallRun(t *testing.T) {
	var r Report
	cfg := AnchorSetupConfig{Held: 2000, Tasks: 4, Streams: 200, Reps: 2, Arms: AnchorSetupArms}
	if err := AnchorSetup(cfg, &r); err != nil {
		t.Fatal(err)
	}
	for _, m := range []string{"create_ns", "goroutines_added_count", "rss_per_anchor_bytes", "heap_per_anchor_bytes"} {
		f, ok := r.Find(anchorSetupHarness, "unattached", m, map[string]any{"held": 2000})
		if !ok || len(f.Samples) != 2 {
			t.Fatalf("unattached %s: %+v", m, f)
		}
		if m == "goroutines_added_count" && f.Max() > 1 {
			t.Fatalf("2,000 unattached anchors added %v goroutines", f.Max())
		}
	}
	n := 0
	for _, f := range r.Figures {
		if f.Arm == "lifecycle" {
			n++
		}
	}
	if n != 5 {
		t.Fatalf("%d lifecycle figures, want 5", n)
	}
	if err := (AnchorSetupConfig{Held: 1, Tasks: 1, Streams: 1, Reps: 1, Arms: []string{"nope"}}).Validate(); err == nil {
		t.Fatal("unknown arm accepted")
	}
}
