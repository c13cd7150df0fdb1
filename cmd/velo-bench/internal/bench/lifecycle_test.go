package bench

import (
	"context"
	"strings"
	"testing"
)

// A small run of every arm each path has reports every figure and the
// ratios to plain, and leaves no anchor behind.
func TestStreamLifecycleSmallRun(t *testing.T) {
	for _, path := range StreamLifecyclePaths {
		t.Run(path, func(t *testing.T) {
			var r Report
			modes := StreamLifecycleModesFor(path)
			cfg := StreamLifecycleConfig{Path: path, Modes: modes, Streams: 100, Concurrency: 4,
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
			// lifecycles/s, CPU, lifecycle p50/p99, held p50/p99; two
			// ratios to plain for each other mode
			for _, m := range modes {
				if count[m] != 6 {
					t.Fatalf("figures per arm: %v", count)
				}
				if m != "plain" && count[m+"/plain"] != 2 {
					t.Fatalf("figures per arm: %v", count)
				}
			}
		})
	}
	for _, bad := range []StreamLifecycleConfig{
		{Path: "carrier-pigeon", Modes: []string{"plain"}, Streams: 1, Concurrency: 1, Reps: 1},
		{Path: "same-worker", Modes: []string{"nope"}, Streams: 1, Concurrency: 1, Reps: 1},
		{Path: "same-worker", Modes: []string{"plain"}, Streams: 0, Concurrency: 1, Reps: 1},
		{Path: "same-worker", Modes: []string{"ack"}, Streams: 1, Concurrency: 1, Reps: 1}, // no messenger
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
	for _, mode := range StreamLifecycleModesFor("same-worker") {
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

// Mode ack on its own, tiny: every lifecycle waits for the consumer's
// message, and the waiters are all gone afterwards (a lost or unmatched
// ack would hang the run or leave one behind).
func TestStreamLifecycleAck(t *testing.T) {
	var r Report
	cfg := StreamLifecycleConfig{Path: "per-stream", Modes: []string{"ack"}, Streams: 20, Concurrency: 2,
		Items: 1, Payload: 16, Warmup: 2, Reps: 1}
	if err := StreamLifecycle(cfg, &r); err != nil {
		t.Fatal(err)
	}
	f, ok := r.Find(streamLifecycleHarness, "ack", "held_after_finalize_p50_us", r.Figures[0].Params)
	if !ok || len(f.Samples) != 1 || f.Samples[0] <= 0 {
		t.Fatalf("ack held_after_finalize_p50_us: %+v", f)
	}
	if err := (StreamLifecycleConfig{Path: "same-worker", Modes: []string{"ack"}, Streams: 1, Concurrency: 1, Reps: 1}).Validate(); err == nil || !strings.Contains(err.Error(), "per-stream") {
		t.Fatalf("ack on the same worker: %v, want an error that names per-stream", err)
	}
}
