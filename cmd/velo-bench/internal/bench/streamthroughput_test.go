package bench

import (
	"runtime"
	"testing"
	"time"
)

// A short stream-mode run moves items on both lane arms, the mux labels
// batches on every lane of the laned arm, and the ratio figure is made.
func TestStreamThroughputLanes(t *testing.T) {
	cfg := StreamThroughputConfig{Lanes: []int{1, 2}, Streams: []int{4}, ItemBytes: 1024,
		Duration: 200 * time.Millisecond, Reps: 1}
	var r Report
	if err := StreamThroughput(cfg, &r); err != nil {
		t.Fatal(err)
	}
	p := map[string]any{"mode": "stream", "transport": "tcp", "streams": 4, "item_bytes": 1024,
		"duration_s": 0.2, "procs": runtime.GOMAXPROCS(0)}
	for _, lanes := range cfg.Lanes {
		f, ok := r.Find("throughput", laneArm(lanes), "items_per_s", p)
		if !ok || f.Median() <= 0 {
			t.Fatalf("lanes=%d: items/s %v (found %v)", lanes, f.Samples, ok)
		}
		u, ok := r.Find("throughput", laneArm(lanes), "mux_lanes_used_count", p)
		if !ok || u.Median() != float64(lanes) {
			t.Fatalf("lanes=%d: mux lanes used %v, want %d", lanes, u.Samples, lanes)
		}
	}
	if _, ok := r.Find("throughput", "lanes=2/lanes=1", "mib_per_s_ratio", p); !ok {
		t.Fatal("no lanes=2/lanes=1 ratio")
	}
}

func TestMinLaneShare(t *testing.T) {
	var b [16]uint64
	if got := minLaneShare(b, 4); got != -1 {
		t.Fatalf("empty: %v", got)
	}
	b[0], b[1], b[2], b[3] = 100, 100, 50, 150
	if got := minLaneShare(b, 4); got != 0.5 {
		t.Fatalf("share %v, want 0.5", got)
	}
	if got := lanesUsed(b); got != 4 {
		t.Fatalf("lanes used %d", got)
	}
}
