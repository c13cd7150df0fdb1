// Package bench holds the harnesses behind `velo-bench <name>` and the one
// output shape they share: a human table by default, or one JSON object per
// figure with --json.
package bench

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"sort"
	"strconv"
	"strings"
	"text/tabwriter"
)

// Figure is one measured number: the median over Reps repetitions, with
// the smallest and largest repetition.
type Figure struct {
	Harness string
	Arm     string
	Metric  string // snake_case, ends in its unit
	Unit    string
	Samples []float64
	Params  map[string]any
}

// Median of the samples.
func (f Figure) Median() float64 { return quantile(f.Samples, 0.5) }

// Min and Max of the samples.
func (f Figure) Min() float64 { return quantile(f.Samples, 0) }
func (f Figure) Max() float64 { return quantile(f.Samples, 1) }

func quantile(xs []float64, q float64) float64 {
	if len(xs) == 0 {
		return 0
	}
	s := append([]float64(nil), xs...)
	sort.Float64s(s)
	return s[int(q*float64(len(s)-1)+0.5)]
}

// rotated returns the arms in the order repetition rep runs them: the list
// rotated left by rep, so that no arm always runs first or last and drift
// over a run (a neighbour's build, a slow phase of the VM) lands on every
// arm in turn. Every harness runs its arms through it.
func rotated[T any](arms []T, rep int) []T {
	if len(arms) == 0 {
		return nil
	}
	k := rep % len(arms)
	out := make([]T, 0, len(arms))
	return append(append(out, arms[k:]...), arms[:k]...)
}

// Report collects figures and prints them.
type Report struct {
	Figures []Figure
}

// Add appends one sample to the figure with the same identity, creating it.
func (r *Report) Add(harness, arm, metric, unit string, v float64, params map[string]any) {
	for i := range r.Figures {
		f := &r.Figures[i]
		if f.Harness == harness && f.Arm == arm && f.Metric == metric && sameParams(f.Params, params) {
			f.Samples = append(f.Samples, v)
			return
		}
	}
	r.Figures = append(r.Figures, Figure{Harness: harness, Arm: arm, Metric: metric, Unit: unit, Samples: []float64{v}, Params: params})
}

func sameParams(a, b map[string]any) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if fmt.Sprint(b[k]) != fmt.Sprint(v) {
			return false
		}
	}
	return true
}

// WriteJSON prints one object per figure, in the shape of DESIGN.md §6.
func (r *Report) WriteJSON(w io.Writer) error {
	enc := json.NewEncoder(w)
	for _, f := range r.Figures {
		obj := map[string]any{}
		for k, v := range f.Params {
			obj[k] = v
		}
		obj["harness"], obj["arm"], obj["metric"], obj["unit"] = f.Harness, f.Arm, f.Metric, f.Unit
		obj["value"], obj["reps"], obj["min"], obj["max"] = round(f.Median()), len(f.Samples), round(f.Min()), round(f.Max())
		if err := enc.Encode(obj); err != nil {
			return err
		}
	}
	return nil
}

// round keeps what a reader needs of v: whole units from 100 up,
// thousandths from 1 up, and four significant digits below 1, so a small
// ratio (wakes per token, 0.002 and less) keeps its digits.
func round(v float64) float64 {
	switch a := math.Abs(v); {
	case a >= 100:
		return math.Round(v)
	case a >= 1 || a == 0:
		return math.Round(v*1000) / 1000
	default:
		r, _ := strconv.ParseFloat(strconv.FormatFloat(v, 'g', 4, 64), 64)
		return r
	}
}

// WriteTable prints a human table. It goes out through a buffer: the
// tabwriter writes every cell's padding and text apart, and unbuffered on
// os.Stdout that was a write system call each, over a thousand for one
// response-plane table, which `strace -c` of a run counted among the
// plane's own writes.
func (r *Report) WriteTable(w io.Writer) error {
	bw := bufio.NewWriterSize(w, tableBuffer)
	tw := tabwriter.NewWriter(bw, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "harness\tarm\tparams\tmetric\tmedian\tmin\tmax\treps\t")
	for _, f := range r.Figures {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%.4g\t%.4g\t%.4g\t%d\t\n",
			f.Harness, f.Arm, paramString(f.Params), f.Metric, f.Median(), f.Min(), f.Max(), len(f.Samples))
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	return bw.Flush()
}

// tableBuffer is the buffer of WriteTable: a table of a few hundred rows
// goes out in a write or two.
const tableBuffer = 64 << 10

func paramString(p map[string]any) string {
	keys := make([]string, 0, len(p))
	for k := range p {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	parts := make([]string, 0, len(keys))
	for _, k := range keys {
		parts = append(parts, fmt.Sprintf("%s=%v", k, p[k]))
	}
	return strings.Join(parts, ",")
}

// Ratio adds a figure arm/base per rep (samples paired by index), for
// must-show ratios measured side by side in one run.
func (r *Report) Ratio(harness, name, metric string, num, den Figure, params map[string]any) {
	n := min(len(num.Samples), len(den.Samples))
	for i := 0; i < n; i++ {
		if den.Samples[i] != 0 {
			r.Add(harness, name, metric, "ratio", num.Samples[i]/den.Samples[i], params)
		}
	}
}

// Find returns the figure with this identity.
func (r *Report) Find(harness, arm, metric string, params map[string]any) (Figure, bool) {
	for _, f := range r.Figures {
		if f.Harness == harness && f.Arm == arm && f.Metric == metric && sameParams(f.Params, params) {
			return f, true
		}
	}
	return Figure{}, false
}
