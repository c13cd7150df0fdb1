package bench

import (
	"context"
	"testing"
)

// A small run of both arms on each path reports every figure and the
// retired/plain ratios, and leaves no anchor behind.
func TestStreamLifecycleSmallRun(t *testing.T) {
	for _, path := range StreamLifecyclePaths {
		t.Run(path, func(t *testing.T) {
			var r Report
			cfg := StreamLifecycleConfig{Path: path, Modes: StreamLifecycleModes, Streams: 100, Concurrency: 4,
				Items: 3, Payload: 16, Warmup: 10, Reps: 2}
			if err := StreamLifecycle(cfg, &r); err != nil {
				t.Fatal(err)
			}
			count := map[string]int{}
			for _, f := range r.Figures {
				if len(f.Samples) != 2 {
					t.Fatalf("%s %s: %d samples, want 2", f.Arm, f.Metric, len(f.Samples))
				}
				count[f.Arm]++
			}
			// lifecycles/s, CPU, lifecycle p50/p99, held p50/p99; two ratios
			if count["plain"] != 6 || count["retired"] != 6 || count["retired/plain"] != 2 {
				t.Fatalf("figures per arm: %v", count)
			}
		})
	}
	for _, bad := range []StreamLifecycleConfig{
		{Path: "mux", Modes: []string{"plain"}, Streams: 1, Concurrency: 1, Reps: 1},
		{Path: "same-worker", Modes: []string{"nope"}, Streams: 1, Concurrency: 1, Reps: 1},
		{Path: "same-worker", Modes: []string{"plain"}, Streams: 0, Concurrency: 1, Reps: 1},
	} {
		if err := bad.Validate(); err == nil {
			t.Fatalf("%+v accepted", bad)
		}
	}
}

// Allocations of one same-worker lifecycle in each mode: awaiting Retired
// costs its channel and the sender's waiter list (logged, so a run shows
// where the retired arm's extra CPU goes).
func TestStreamLifecycleAllocs(t *testing.T) {
	ctx := context.Background()
	e, err := startLifecycleEnds(ctx, "same-worker")
	if err != nil {
		t.Fatal(err)
	}
	defer e.stop()
	payload := make([]byte, 16)
	allocs := map[string]float64{}
	for _, mode := range StreamLifecycleModes {
		allocs[mode] = testing.AllocsPerRun(1000, func() {
			if _, err := streamLifecycle(ctx, e, mode, 1, payload); err != nil {
				t.Fatal(err)
			}
		})
	}
	t.Logf("allocs per same-worker lifecycle: %v", allocs)
	if allocs["retired"] > allocs["plain"]+2 {
		t.Fatalf("awaiting Retired adds %v allocations, want at most 2", allocs["retired"]-allocs["plain"])
	}
}
