package soak

import (
	"context"
	"errors"
	"testing"
	"time"
)

// The end-to-end run: two child processes (this test binary), the
// messenger workload through fault proxies for a few seconds. Faults
// make errors; the oracle still finds every admitted item arrived once
// or failed with an error at its sender.
func TestSoakMessengerWithFaults(t *testing.T) {
	if testing.Short() {
		t.Skip("starts child processes")
	}
	tier, _ := TierByName("test")
	res, err := Run(context.Background(), Config{Workload: "messenger", Transport: "tcp", Tier: tier,
		Faults: true, Seed: 1, Children: 2, spawn: testSpawn})
	if err != nil {
		t.Fatalf("run: %v (%+v)", err, verdicts(res))
	}
	w := res[0]
	v := w.Verdict
	if v.Items[KindUnary] == 0 || v.Items[KindFire] == 0 {
		t.Fatalf("no traffic: %+v", v)
	}
	if sum(v.Lost)+sum(v.Dups)+sum(v.Corrupt)+v.Unknown != 0 {
		t.Fatalf("loss: %+v", v)
	}
	if len(w.Faults) == 0 {
		t.Fatal("no fault was applied")
	}
	if w.Series == nil || len(w.Trends) != 2 {
		t.Fatalf("no samples: %d points, %d trends", len(w.Series), len(w.Trends))
	}
}

// The injected leak (a goroutine parked per request handled) breaks the
// goroutine bound; the same run without it does not.
func TestSoakLeakBreaksTheBound(t *testing.T) {
	if testing.Short() {
		t.Skip("starts child processes")
	}
	tier, _ := TierByName("test")
	tier.Duration = 6 * time.Second
	// A bound far above a healthy short run's wander, far below one
	// goroutine a request.
	tier.Bounds = &Bounds{RSSPerMin: 1 << 40, GoroutinesPerMin: 2000}
	for _, leak := range []bool{false, true} {
		res, err := Run(context.Background(), Config{Workload: "messenger", Transport: "tcp", Tier: tier,
			Seed: 2, Children: 2, Leak: leak, spawn: testSpawn})
		t.Logf("leak %v: trends %+v", leak, trends(res))
		switch {
		case leak && !errors.Is(err, ErrFailed):
			t.Fatalf("leak: %v, want ErrFailed (%+v)", err, trends(res))
		case leak && len(res[0].Breaks) == 0:
			t.Fatalf("leak: failed, but no trend broke: %+v", verdicts(res))
		case !leak && err != nil:
			t.Fatalf("no leak: %v (%+v)", err, trends(res))
		}
	}
}

func verdicts(res []*WorkloadResult) []Verdict {
	var out []Verdict
	for _, r := range res {
		out = append(out, r.Verdict)
	}
	return out
}

func trends(res []*WorkloadResult) [][]Trend {
	var out [][]Trend
	for _, r := range res {
		out = append(out, r.Trends)
	}
	return out
}

// A silent loss across the processes (a test switch makes the receiving
// handler forget every 100th unary item it still answers) fails the run
// with the items counted as lost.
func TestSoakFindsASilentLoss(t *testing.T) {
	if testing.Short() {
		t.Skip("starts child processes")
	}
	tier, _ := TierByName("test")
	tier.Duration = 3 * time.Second
	res, err := Run(context.Background(), Config{Workload: "messenger", Transport: "tcp", Tier: tier,
		Seed: 3, Children: 2, Lose: true, spawn: testSpawn})
	if !errors.Is(err, ErrFailed) {
		t.Fatalf("run: %v, want ErrFailed", err)
	}
	v := res[0].Verdict
	if v.Lost[KindUnary] == 0 || v.Lost[KindFire] != 0 {
		t.Fatalf("lost %v, want unary items only", v.Lost)
	}
}
