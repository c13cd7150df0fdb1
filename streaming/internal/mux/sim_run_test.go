package mux

import (
	"flag"
	"fmt"
	"os"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/velo-go/velo/transport/sim"
)

var (
	simSeeds   = flag.Int("sim.seeds", 0, "seeded mux simulation runs for TestSimSeeds (0: $VELO_SIM_SEEDS, else a CI-sized count)")
	simReplays = flag.Int("sim.replays", 0, "run this many seeds twice each and count those whose traces differ (TestSimReplayMany)")
	simSeed    = flag.Int64("sim.seed", -1, "replay one seed of the mux simulation (TestSimReplaySeed): run it twice and print its trace")
)

// simCISeeds is how many seeds `go test` runs by default.
const simCISeeds = 32

func seedCount() int {
	if *simSeeds > 0 {
		return *simSeeds
	}
	if n, err := strconv.Atoi(os.Getenv("VELO_SIM_SEEDS")); err == nil && n > 0 {
		return n
	}
	return simCISeeds
}

// oneProc runs the muxes of a test on one processor, for the test's
// length: a goroutine that a step wakes (a batcher a grant signalled) then
// runs only once the step's own goroutine blocks, instead of beside it
// mid-step, so the order in which the muxes' goroutines touch shared
// state follows the program, not the machine. synctest.Wait orders the
// steps; this orders what runs within one.
func oneProc(t *testing.T) {
	old := runtime.GOMAXPROCS(1)
	t.Cleanup(func() { runtime.GOMAXPROCS(old) })
}

// simResult is what one run left.
type simResult struct {
	sc    *scenario
	trace []sim.Event
	bad   []string
}

// runSeed runs one seed. It must be called inside a synctest bubble.
func runSeed(seed uint64) simResult {
	sc := newScenario(seed)
	w := newSimWorld(seed, sc)
	w.start()
	var last time.Duration
	for _, p := range sc.streams {
		last = max(last, p.start, p.cancelAt, p.stopAt)
	}
	for _, f := range sc.faults {
		last = max(last, f.heal)
	}
	begin := time.Now()
	deadline := begin.Add(last + 10*time.Minute)
	w.drive(deadline, func() bool {
		if time.Since(begin) < last {
			return false
		}
		for _, s := range w.streams {
			if s.st == nil || !s.ended || !s.prodDone {
				return false
			}
		}
		return w.net.Queued() == 0
	})
	w.drive(time.Now().Add(w.simTail()), func() bool { return false })
	w.checkFinal()
	res := simResult{sc: sc, trace: w.net.Trace(), bad: w.bad}
	// Teardown is not traced: Close makes its goodbye writers in map
	// order. Each mux's goroutines must end, or the bubble reports them.
	for _, n := range w.nodes {
		n.mx.Close()
	}
	w.net.Close()
	return res
}

// report is the failure message of a seed: what went wrong, the scenario,
// and how to replay it.
func (r simResult) report(seed uint64) string {
	var b strings.Builder
	fmt.Fprintf(&b, "seed %d: %d invariant violations:\n", seed, len(r.bad))
	for i, v := range r.bad {
		if i == 10 {
			fmt.Fprintf(&b, "  ... and %d more\n", len(r.bad)-10)
			break
		}
		fmt.Fprintf(&b, "  %s\n", v)
	}
	fmt.Fprintf(&b, "scenario: %v\n", r.sc)
	fmt.Fprintf(&b, "replay: go test ./streaming/internal/mux -run 'TestSimReplaySeed$' -sim.seed=%d -v\n", seed)
	return b.String()
}

// TestSimSeeds runs seeded simulations of two or three nodes' muxes with
// random streams, slow and cancelling consumers, lost batches, reordering
// across lanes and partitions with and without peer loss, and checks the
// invariants after every step and at the end (sim_check_test.go). The
// count is -sim.seeds (or $VELO_SIM_SEEDS), else simCISeeds.
func TestSimSeeds(t *testing.T) {
	oneProc(t)
	n := seedCount()
	start := time.Now()
	for seed := range uint64(n) {
		t.Run(strconv.FormatUint(seed, 10), func(t *testing.T) {
			t.Parallel()
			synctest.Test(t, func(t *testing.T) {
				if r := runSeed(seed); len(r.bad) > 0 {
					t.Error(r.report(seed))
				}
			})
		})
	}
	t.Cleanup(func() { t.Logf("%d seeds in %v", n, time.Since(start)) })
}

// TestSimReplayIsExact: a seed run twice makes the same trace, event for
// event (every batch sent, delivered, lost or dropped, every partition,
// and what the nodes' producers and consumers did, at the same virtual
// times); the seeds are picked to include loss, a partition and a peer
// loss. (TestSimReplayMany measures it over many seeds.)
func TestSimReplayIsExact(t *testing.T) {
	oneProc(t)
	picked := map[string]uint64{}
	for seed := uint64(0); len(picked) < 3 && seed < 500; seed++ {
		sc := newScenario(seed)
		switch {
		case sc.loss > 0 && picked["loss"] == 0:
			picked["loss"] = seed
		case len(sc.faults) > 0 && sc.faults[0].peerLoss && picked["peer loss"] == 0:
			picked["peer loss"] = seed
		case len(sc.faults) > 0 && !sc.faults[0].peerLoss && picked["cut"] == 0:
			picked["cut"] = seed
		}
	}
	for what, seed := range picked {
		t.Run(what, func(t *testing.T) {
			var a, b simResult
			synctest.Test(t, func(t *testing.T) { a = runSeed(seed) })
			synctest.Test(t, func(t *testing.T) { b = runSeed(seed) })
			if len(a.trace) < 20 {
				t.Fatalf("seed %d: a trace of %d events is too short to prove anything", seed, len(a.trace))
			}
			if i := sim.FirstDifference(a.trace, b.trace); i >= 0 {
				t.Fatalf("seed %d: the traces differ at event %d of %d/%d:\n  %v\n  %v", seed, i, len(a.trace), len(b.trace), at(a.trace, i), at(b.trace, i))
			}
			t.Logf("seed %d (%s): %d events, digest %016x, identical twice", seed, what, len(a.trace), sim.Digest(a.trace))
		})
	}
}

func at(tr []sim.Event, i int) string {
	if i < len(tr) {
		return tr[i].String()
	}
	return "(end)"
}

// TestSimReplayMany runs -sim.replays seeds twice each and counts those
// whose traces differ (skipped unless set): the measure of how
// deterministic the harness is, beyond the picked seeds above.
func TestSimReplayMany(t *testing.T) {
	oneProc(t)
	if *simReplays <= 0 {
		t.Skip("no -sim.replays")
	}
	differ := 0
	for seed := range uint64(*simReplays) {
		var a, b simResult
		synctest.Test(t, func(t *testing.T) { a = runSeed(seed) })
		synctest.Test(t, func(t *testing.T) { b = runSeed(seed) })
		if i := sim.FirstDifference(a.trace, b.trace); i >= 0 {
			differ++
			t.Errorf("seed %d: traces differ at event %d:\n  %v\n  %v", seed, i, at(a.trace, i), at(b.trace, i))
		}
	}
	t.Logf("%d of %d seeds replayed with a different trace", differ, *simReplays)
}

// TestSimReplaySeed replays -sim.seed: it runs the seed twice, checks that
// the traces match, and logs the scenario, the trace and any violation.
func TestSimReplaySeed(t *testing.T) {
	oneProc(t)
	if *simSeed < 0 {
		t.Skip("no -sim.seed to replay")
	}
	seed := uint64(*simSeed)
	var a, b simResult
	synctest.Test(t, func(t *testing.T) { a = runSeed(seed) })
	synctest.Test(t, func(t *testing.T) { b = runSeed(seed) })
	t.Logf("scenario: %v\ntrace:\n%s", a.sc, sim.FormatTrace(a.trace))
	if i := sim.FirstDifference(a.trace, b.trace); i >= 0 {
		t.Errorf("the replay differs at event %d:\n  %v\n  %v", i, at(a.trace, i), at(b.trace, i))
	}
	if len(a.bad) > 0 {
		t.Error(a.report(seed))
	}
}
