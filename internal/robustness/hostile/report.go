package hostile

import (
	"fmt"
	"io"
	"sort"
	"strings"
	"text/tabwriter"
	"time"
)

// Summary is a few lines on one result, for a test log.
func Summary(r *Result) string {
	var b strings.Builder
	fmt.Fprintf(&b, "%s: %d %s on %d hostile connections; victim %.2f µs CPU per %s (%.2f ms) over %v (baseline %.1f%% of a core), %.2f%% of a core %v after; heap %+.2f MiB (%s); goroutines %+d; control %.1f ms; legit %d/%d",
		r.Case, r.Frames, r.units(), r.Conns, r.CPUPerFrameUS, r.unit(), float64(r.AttackCPUNS)/1e6, time.Duration(r.AttackNS).Round(time.Millisecond), 100*r.BaselineCores,
		100*r.IdleCores, time.Duration(r.IdleStartNS).Round(time.Millisecond),
		float64(r.HeapGrowth)/(1<<20), r.HeapGrowthNode, r.GoroutineDelta, r.ControlRTTMS, r.LegitOK, r.LegitStreams)
	if r.VictimDied {
		fmt.Fprintf(&b, "\n  victim died: %s", r.DeathNote)
	}
	if len(r.Extra) > 0 {
		keys := make([]string, 0, len(r.Extra))
		for k := range r.Extra {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		b.WriteString("\n  extra:")
		for _, k := range keys {
			fmt.Fprintf(&b, " %s=%g", k, r.Extra[k])
		}
	}
	writeList(&b, "refused", SortedCounters(r.Refusals), 8)
	writeList(&b, "symptoms", SortedCounters(r.Symptoms), 8)
	writeList(&b, "legit harmed", r.LegitProblems, 5)
	writeList(&b, "notes", r.Notes, 5)
	return b.String()
}

func (r *Result) units() string {
	if r.Unit != "" {
		return r.Unit
	}
	return "frames"
}

func writeList(b *strings.Builder, what string, xs []string, most int) {
	if len(xs) == 0 {
		return
	}
	fmt.Fprintf(b, "\n  %s:", what)
	for i, x := range xs {
		if i == most {
			fmt.Fprintf(b, "\n    … %d more", len(xs)-most)
			break
		}
		fmt.Fprintf(b, "\n    %s", x)
	}
}

// WriteTable prints the must-show table: one row per case with its
// figures and verdict, then, per case, the counters that named the
// refusals and what the attack harmed.
func WriteTable(w io.Writer, results []Result, b Bounds) error {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "case\tframes\tconns\tcpu/frame µs\tidle after\theap growth\tlegit ok\tvictim\trefused (counters)\tverdict")
	for i := range results {
		r := &results[i]
		victim := "alive"
		if r.VictimDied {
			victim = "DIED"
		}
		verdict := "held"
		if f := r.Failures(b); len(f) > 0 {
			verdict = "FAIL: " + strings.Join(f, "; ")
		}
		frames := fmt.Sprint(r.Frames)
		if r.Unit != "" {
			frames += " " + r.Unit
		}
		fmt.Fprintf(tw, "%s\t%s\t%d\t%.2f\t%.2f%%\t%+.2f MiB\t%d/%d\t%s\t%d\t%s\n",
			r.Case, frames, r.Conns, r.CPUPerFrameUS, 100*r.IdleCores, float64(r.HeapGrowth)/(1<<20),
			r.LegitOK, r.LegitStreams, victim, len(r.Refusals), verdict)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	fmt.Fprintln(w, "cases:")
	for i := range results {
		if c, ok := CaseByName(results[i].Case); ok {
			fmt.Fprintf(w, "  %s: %s\n", c.Name, c.Issue)
		}
	}
	for i := range results {
		r := &results[i]
		var b strings.Builder
		writeList(&b, "refused", SortedCounters(r.Refusals), 6)
		writeList(&b, "symptoms", SortedCounters(r.Symptoms), 4)
		writeList(&b, "legit harmed", r.LegitProblems, 3)
		writeList(&b, "notes", r.Notes, 3)
		if b.Len() > 0 {
			fmt.Fprintf(w, "%s:%s\n", r.Case, b.String())
		}
	}
	return nil
}
