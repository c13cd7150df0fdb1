package bench

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"slices"
	"time"

	"github.com/velo-go/velo/internal/robustness/hostile"
)

// The hostile harness runs the attacks of hostile peers between processes and
// prints the must-show table (package hostile has the cases and the
// measurement; the tests in internal/robustness assert the same bounds on
// the same cases). Each case starts this binary twice more as node
// processes (`velo-bench hostile` with hostile.RoleEnv set): a victim,
// and a legit peer whose streams run to or from it. The attacker is this
// process: raw TCP connections that write velo frames by hand, and bare
// messengers that speak the protocol with their own identity.
//
// Arms are the cases. Figures per case and rep: the hostile frames sent,
// the victim's CPU per frame (getrusage over the attack less its CPU with
// the legit streams alone), its CPU in the window that starts a second
// after the attack, the largest live-heap growth of either node, the
// legit streams that arrived whole and in order, the victim's counters
// that named a refusal, whether it died, how long a control round trip
// took right after the attack, and pass (1 when every bound of the issue
// held).

const hostileHarness = "hostile"

// HostileConfig sets the hostile harness.
type HostileConfig struct {
	Cases        []string // names of hostile.Cases; empty: all
	Streams      int      // legit streams per direction (20)
	PaceUS       int      // a legit producer's pause between items (20,000 µs)
	FuzzDuration time.Duration
	FuzzRate     int     // fuzzer frames per second (10,000)
	Scale        float64 // multiplies the frames of the flood cases (1)
	Seed         int64   // the fuzzer's; 0 draws one per rep
	Reps         int
	// Log gets progress and, after each rep, the must-show table; Echo the
	// nodes' stderr. Either may be nil.
	Log, Echo io.Writer
}

// Hostile runs the harness and adds its figures to r. Started as a node
// process, it serves as one and never returns.
func Hostile(cfg HostileConfig, r *Report) error {
	if hostile.IsChild() {
		hostile.RunChild()
	}
	cases := hostile.Cases()
	if len(cfg.Cases) > 0 {
		var picked []*hostile.Case
		for _, name := range cfg.Cases {
			c, ok := hostile.CaseByName(name)
			if !ok {
				return fmt.Errorf("unknown case %q (want one of %v)", name, caseNames(cases))
			}
			picked = append(picked, c)
		}
		cases = picked
	}
	if cfg.Reps < 1 {
		return errors.New("reps must be at least 1")
	}
	exe, err := os.Executable()
	if err != nil {
		return err
	}
	spawn := func() *exec.Cmd { return exec.Command(exe, hostileHarness) }
	opts := hostile.Options{
		Streams: cfg.Streams, PaceUS: cfg.PaceUS, FuzzDuration: cfg.FuzzDuration, FuzzRate: cfg.FuzzRate,
		Scale: cfg.Scale, Seed: cfg.Seed, Log: cfg.Log, Echo: cfg.Echo,
	}
	bounds := hostile.DefaultBounds()
	failed := 0
	for rep := 0; rep < cfg.Reps; rep++ {
		var results []hostile.Result
		for _, c := range rotated(cases, rep) {
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute+cfg.FuzzDuration)
			res, err := hostile.Run(ctx, spawn, c, opts)
			cancel()
			if err != nil {
				return fmt.Errorf("rep %d, case %s: %w", rep+1, c.Name, err)
			}
			addHostile(r, &res, bounds, cfg)
			results = append(results, res)
			if len(res.Failures(bounds)) > 0 {
				failed++
			}
		}
		if cfg.Log != nil {
			slices.SortFunc(results, func(a, b hostile.Result) int { return caseIndex(a.Case) - caseIndex(b.Case) })
			fmt.Fprintf(cfg.Log, "\nhostile, rep %d of %d (bounds: %.0f µs CPU per frame, %.0f µs per answered request, %.0f%% of a core 1 s after, %.0f MiB heap per hostile connection):\n",
				rep+1, cfg.Reps, bounds.CPUPerFrameUS, bounds.AnsweredCPUPerFrameUS, 100*bounds.IdleCores, float64(bounds.HeapPerConn)/(1<<20))
			if err := hostile.WriteTable(cfg.Log, results, bounds); err != nil {
				return err
			}
		}
	}
	if cfg.Log != nil && failed > 0 {
		fmt.Fprintf(cfg.Log, "\n%d case runs broke a bound of their case\n", failed)
	}
	return nil
}

func addHostile(r *Report, res *hostile.Result, b hostile.Bounds, cfg HostileConfig) {
	streams := cfg.Streams
	if streams == 0 {
		streams = 20
	}
	params := map[string]any{"streams": streams}
	if res.Case == "fuzz" {
		params["fuzz_s"] = cfg.FuzzDuration.Seconds()
	}
	add := func(metric, unit string, v float64) { r.Add(hostileHarness, res.Case, metric, unit, v, params) }
	died, pass := 0.0, 1.0
	if res.VictimDied {
		died = 1
	}
	if len(res.Failures(b)) > 0 {
		pass = 0
	}
	add("frames_count", "count", float64(res.Frames))
	add("victim_cpu_per_frame_us", "us", res.CPUPerFrameUS)
	add("victim_idle_after_ratio", "ratio", res.IdleCores)
	add("heap_growth_bytes", "bytes", float64(res.HeapGrowth))
	add("legit_streams_ok_count", "count", float64(res.LegitOK))
	add("legit_streams_count", "count", float64(res.LegitStreams))
	add("refusal_counters_count", "count", float64(len(res.Refusals)))
	add("victim_died_count", "count", died)
	add("control_rtt_ms", "ms", res.ControlRTTMS)
	add("pass_count", "count", pass)
}

func caseNames(cs []*hostile.Case) []string {
	out := make([]string, len(cs))
	for i, c := range cs {
		out[i] = c.Name
	}
	return out
}

// caseIndex orders the table as hostile.Cases does.
func caseIndex(name string) int {
	for i, c := range hostile.Cases() {
		if c.Name == name {
			return i
		}
	}
	return -1
}
