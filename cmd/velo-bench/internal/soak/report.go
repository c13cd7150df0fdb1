package soak

import (
	"fmt"
	"io"
	"os"
	"sort"
	"strings"
	"text/tabwriter"
	"time"
)

// IsTerminal says whether f is a terminal (a character device), where a
// progress bar belongs; a pipe or a file gets none.
func IsTerminal(f *os.File) bool {
	st, err := f.Stat()
	return err == nil && st.Mode()&os.ModeCharDevice != 0
}

func drawProgress(w io.Writer, name string, at, total time.Duration, ops, errs int64, faults int) {
	const width = 30
	done := int(float64(width) * float64(at) / float64(total))
	done = min(max(done, 0), width)
	fmt.Fprintf(w, "\r%-10s [%s%s] %3ds/%ds  ops %d  errors %d  faults %d ", name,
		strings.Repeat("=", done), strings.Repeat(" ", width-done), int(at.Seconds()), int(total.Seconds()), ops, errs, faults)
}

// WriteSummary prints the summary table of a run, then the errors by
// kind, the faults and any failure.
func WriteSummary(w io.Writer, tier Tier, faults bool, res []*WorkloadResult) {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "workload\tops\titems\tMiB\terrors\tlost\tdup\treordered\tcorrupt\texcused\tff_fault_dropped\tp50\tp99\tRSS MiB/min\tgoroutines/min\tverdict\t")
	for _, r := range res {
		v := r.Verdict
		var errs int64
		for _, n := range r.Errors {
			errs += n
		}
		rss, gor := worstTrend(r.Trends)
		verdict := "ok"
		if r.Failed() {
			verdict = "FAIL"
		}
		fmt.Fprintf(tw, "%s\t%d\t%d\t%.1f\t%d\t%d\t%d\t%d\t%d\t%d\t%d\t%s\t%s\t%s\t%s\t%s\t\n", r.Name, r.Ops, r.Items,
			float64(r.Bytes)/mib, errs, sum(v.Lost), sum(v.Dups), sum(v.Reordered), sum(v.Corrupt), sum(v.Excused),
			v.FaultDropped, fmtDur(r.Latency.Quantile(0.5)), fmtDur(r.Latency.Quantile(0.99)), rss, gor, verdict)
	}
	tw.Flush()
	bounds := "none (tier too short to judge a trend)"
	if tier.Bounds != nil {
		bounds = fmt.Sprintf("RSS ≤ %.2f MiB/min, goroutines ≤ %.0f/min after a %s warm-up", tier.Bounds.RSSPerMin/mib, tier.Bounds.GoroutinesPerMin, tier.Warmup)
	}
	fmt.Fprintf(w, "tier %s (%s a workload), faults %v; slope bounds: %s\n", tier.Name, tier.Duration, faults, bounds)
	for _, r := range res {
		writeDetails(w, r)
	}
}

func writeDetails(w io.Writer, r *WorkloadResult) {
	if len(r.Errors) > 0 {
		keys := make([]string, 0, len(r.Errors))
		for k := range r.Errors {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		parts := make([]string, len(keys))
		for i, k := range keys {
			parts[i] = fmt.Sprintf("%s ×%d", k, r.Errors[k])
		}
		fmt.Fprintf(w, "%s errors: %s\n", r.Name, strings.Join(parts, ", "))
		for _, k := range keys {
			fmt.Fprintf(w, "  %s, first: %.160s\n", k, r.FirstErrors[k])
		}
	}
	if len(r.Faults) > 0 {
		count := map[FaultKind]int{}
		conns := 0
		for _, f := range r.Faults {
			count[f.Kind]++
			conns += f.Conns
		}
		fmt.Fprintf(w, "%s faults: drop ×%d, reset ×%d, pause ×%d, blackhole ×%d; %d connections cut; the proxies took %d connections and forwarded %.1f MiB\n", r.Name,
			count[FaultDrop], count[FaultReset], count[FaultPause], count[FaultBlackhole], conns, r.ProxiedConns, float64(r.ProxiedBytes)/mib)
	}
	for _, t := range r.Trends {
		fmt.Fprintf(w, "%s %s: %d samples after warm-up, RSS %+.3f MiB/min, goroutines %+.1f/min\n", r.Name, t.Name, t.Samples, t.RSSPerMin/mib, t.GoroutinesPerMin)
	}
	for _, b := range r.Breaks {
		fmt.Fprintf(w, "%s FAIL: %s slope past the bound\n", r.Name, b)
	}
	for _, e := range r.Verdict.Examples {
		fmt.Fprintf(w, "%s FAIL: %s\n", r.Name, e)
	}
}

// worstTrend formats the largest slopes over the children.
func worstTrend(ts []Trend) (rss, gor string) {
	if len(ts) == 0 || !ts[0].OK {
		return "-", "-"
	}
	r, g := ts[0].RSSPerMin, ts[0].GoroutinesPerMin
	for _, t := range ts[1:] {
		r, g = max(r, t.RSSPerMin), max(g, t.GoroutinesPerMin)
	}
	return fmt.Sprintf("%+.2f", r/mib), fmt.Sprintf("%+.1f", g)
}

func fmtDur(d time.Duration) string {
	switch {
	case d == 0:
		return "-"
	case d < time.Millisecond:
		return fmt.Sprintf("%dµs", d.Microseconds())
	case d >= time.Second:
		return fmt.Sprintf("%.2gs", d.Seconds())
	default:
		return fmt.Sprintf("%.1fms", float64(d)/float64(time.Millisecond))
	}
}
