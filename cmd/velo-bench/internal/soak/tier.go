package soak

import (
	"fmt"
	"time"
)

// Tier is how long and how hard a run goes, and what it may show.
type Tier struct {
	Name string
	// Duration is each workload's run; the trends are fitted past Warmup.
	Duration, Warmup time.Duration
	// FaultGap is the mean time between faults with --faults.
	FaultGap time.Duration
	// Rates are each child's operations a second per peer, by workload.
	Rates map[string]int
	// Bounds fail the run; nil for a tier too short to judge a trend.
	Bounds *Bounds
}

const mib = 1 << 20

var defaultRates = map[string]int{"messenger": 600, "stream": 60, "rendezvous": 30}

// The bounds. A healthy child's goroutine floor steps by a handful when
// a fault makes it re-dial, and its RSS settles within the warm-up; one
// goroutine leaked per request climbs by tens of thousands a minute (and
// 8 KiB of stack each, hundreds of MiB a minute).
var ciBounds = Bounds{RSSPerMin: 16 * mib, GoroutinesPerMin: 60}

var tiers = map[string]Tier{
	// test: the end-to-end test's few seconds; too short for trends.
	"test": {Name: "test", Duration: 5 * time.Second, Warmup: 2 * time.Second, FaultGap: 700 * time.Millisecond, Rates: defaultRates},
	// ci: three workloads in well under three minutes.
	"ci": {Name: "ci", Duration: 35 * time.Second, Warmup: 12 * time.Second, FaultGap: 3 * time.Second, Rates: defaultRates, Bounds: &ciBounds},
	// nightly: ten minutes a workload; the longer fit allows a tighter bound.
	"nightly": {Name: "nightly", Duration: 10 * time.Minute, Warmup: time.Minute, FaultGap: 5 * time.Second, Rates: defaultRates,
		Bounds: &Bounds{RSSPerMin: 2 * mib, GoroutinesPerMin: 5}},
	// long: two hours a workload.
	"long": {Name: "long", Duration: 2 * time.Hour, Warmup: 5 * time.Minute, FaultGap: 10 * time.Second, Rates: defaultRates,
		Bounds: &Bounds{RSSPerMin: 256 << 10, GoroutinesPerMin: 1}},
}

// TierByName returns a tier: test, ci, nightly or long.
func TierByName(name string) (Tier, error) {
	t, ok := tiers[name]
	if !ok {
		return Tier{}, fmt.Errorf("unknown tier %q (want ci, nightly, long or test)", name)
	}
	return t, nil
}
