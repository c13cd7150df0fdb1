package soak

import (
	"fmt"
	"io"
	"os"
	"strings"
	"time"
)

// The plot: one row a workload, two panels a row: the worst child's p50
// and p99 latency each second (log scale), and every child's RSS. A
// dashed line marks the end of the warm-up, red bands the faults. SVG is
// written by hand: it is a few polylines.

const (
	panelW, panelH                  = 460, 200
	marginL, marginT, marginB, gapX = 64, 28, 34, 40
)

var childColors = []string{"#1f77b4", "#ff7f0e", "#2ca02c", "#9467bd", "#8c564b", "#e377c2"}

// WritePlotFile writes the plot of res to path.
func WritePlotFile(path string, res []*WorkloadResult) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	if err := WritePlot(f, res); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

// WritePlot writes the SVG plot of res to w.
func WritePlot(w io.Writer, res []*WorkloadResult) error {
	rowH := marginT + panelH + marginB
	width := 2*(marginL+panelW) + gapX + 20
	height := len(res)*rowH + 10
	var b strings.Builder
	fmt.Fprintf(&b, `<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" font-family="sans-serif" font-size="11">`+"\n", width, height)
	fmt.Fprintf(&b, `<rect width="100%%" height="100%%" fill="white"/>`+"\n")
	for i, r := range res {
		y0 := i*rowH + marginT
		latencyPanel(&b, r, marginL, y0)
		rssPanel(&b, r, 2*marginL+panelW+gapX, y0)
	}
	b.WriteString("</svg>\n")
	_, err := io.WriteString(w, b.String())
	return err
}

// frame draws a panel's box, title, faults and warm-up line, and returns
// the x of a time.
func frame(b *strings.Builder, r *WorkloadResult, x0, y0 int, title string) func(time.Duration) float64 {
	total := r.Elapsed
	if total <= 0 {
		total = time.Second
	}
	xOf := func(t time.Duration) float64 { return float64(x0) + float64(panelW)*float64(t)/float64(total) }
	fmt.Fprintf(b, `<text x="%d" y="%d" font-weight="bold">%s</text>`+"\n", x0, y0-10, title)
	start := r.runStart
	for _, f := range r.Faults {
		a, z := xOf(f.From.Sub(start)), xOf(f.To.Sub(start))
		fmt.Fprintf(b, `<rect x="%.1f" y="%d" width="%.1f" height="%d" fill="#d62728" fill-opacity="0.15"/>`+"\n", a, y0, max(z-a, 1.5), panelH)
	}
	wx := xOf(r.Warmup)
	fmt.Fprintf(b, `<line x1="%.1f" y1="%d" x2="%.1f" y2="%d" stroke="#666" stroke-dasharray="4 3"/>`+"\n", wx, y0, wx, y0+panelH)
	fmt.Fprintf(b, `<rect x="%d" y="%d" width="%d" height="%d" fill="none" stroke="#333"/>`+"\n", x0, y0, panelW, panelH)
	for s := time.Duration(0); s <= total; s += tickStep(total) {
		x := xOf(s)
		fmt.Fprintf(b, `<text x="%.1f" y="%d" text-anchor="middle">%ds</text>`+"\n", x, y0+panelH+14, int(s.Seconds()))
	}
	return xOf
}

func tickStep(total time.Duration) time.Duration {
	for _, s := range []time.Duration{time.Second, 5 * time.Second, 10 * time.Second, 30 * time.Second, time.Minute, 5 * time.Minute, 10 * time.Minute, 30 * time.Minute, time.Hour} {
		if total/s <= 8 {
			return s
		}
	}
	return 2 * time.Hour
}

func latencyPanel(b *strings.Builder, r *WorkloadResult, x0, y0 int) {
	xOf := frame(b, r, x0, y0, r.Name+": latency per second, worst child (log)")
	lo, hi := 100*time.Microsecond, 10*time.Millisecond
	for _, p := range r.Series {
		if p.P50 > 0 {
			lo = min(lo, p.P50)
		}
		hi = max(hi, p.P99)
	}
	ll, lh := log10(lo), log10(hi)
	yOf := func(d time.Duration) float64 {
		return float64(y0+panelH) - float64(panelH)*(log10(max(d, lo))-ll)/(lh-ll)
	}
	for d := time.Microsecond; d <= hi*10; d *= 10 {
		if d < lo || d > hi {
			continue
		}
		y := yOf(d)
		fmt.Fprintf(b, `<line x1="%d" y1="%.1f" x2="%d" y2="%.1f" stroke="#ddd"/><text x="%d" y="%.1f" text-anchor="end">%s</text>`+"\n",
			x0, y, x0+panelW, y, x0-4, y+4, fmtDur(d))
	}
	for _, s := range []struct {
		name, color string
		get         func(Point) time.Duration
	}{{"p50", "#1f77b4", func(p Point) time.Duration { return p.P50 }}, {"p99", "#d62728", func(p Point) time.Duration { return p.P99 }}} {
		var pts []string
		for _, p := range r.Series {
			if v := s.get(p); v > 0 {
				pts = append(pts, fmt.Sprintf("%.1f,%.1f", xOf(p.At), yOf(v)))
			}
		}
		fmt.Fprintf(b, `<polyline fill="none" stroke="%s" stroke-width="1.5" points="%s"/>`+"\n", s.color, strings.Join(pts, " "))
	}
	legend(b, x0+panelW-90, y0+14, []string{"p50", "p99"}, []string{"#1f77b4", "#d62728"})
}

func rssPanel(b *strings.Builder, r *WorkloadResult, x0, y0 int) {
	xOf := frame(b, r, x0, y0, r.Name+": RSS by child (MiB)")
	var hi int64 = 16 * mib
	n := 0
	for _, p := range r.Series {
		for _, v := range p.RSS {
			hi = max(hi, v)
		}
		n = max(n, len(p.RSS))
	}
	top := float64(hi) * 1.15 / mib
	yOf := func(v float64) float64 { return float64(y0+panelH) - float64(panelH)*v/top }
	step := niceStep(top)
	for v := 0.0; v <= top; v += step {
		y := yOf(v)
		fmt.Fprintf(b, `<line x1="%d" y1="%.1f" x2="%d" y2="%.1f" stroke="#ddd"/><text x="%d" y="%.1f" text-anchor="end">%.0f</text>`+"\n",
			x0, y, x0+panelW, y, x0-4, y+4, v)
	}
	var names, colors []string
	for c := 0; c < n; c++ {
		var pts []string
		for _, p := range r.Series {
			if c < len(p.RSS) && p.RSS[c] > 0 {
				pts = append(pts, fmt.Sprintf("%.1f,%.1f", xOf(p.At), yOf(float64(p.RSS[c])/mib)))
			}
		}
		color := childColors[c%len(childColors)]
		fmt.Fprintf(b, `<polyline fill="none" stroke="%s" stroke-width="1.5" points="%s"/>`+"\n", color, strings.Join(pts, " "))
		names, colors = append(names, fmt.Sprintf("child %d", c)), append(colors, color)
	}
	legend(b, x0+panelW-90, y0+14, names, colors)
}

func legend(b *strings.Builder, x, y int, names, colors []string) {
	for i, n := range names {
		yy := y + i*14
		fmt.Fprintf(b, `<line x1="%d" y1="%d" x2="%d" y2="%d" stroke="%s" stroke-width="2"/><text x="%d" y="%d">%s</text>`+"\n",
			x, yy-4, x+18, yy-4, colors[i], x+22, yy, n)
	}
}

func niceStep(top float64) float64 {
	for _, s := range []float64{5, 10, 20, 50, 100, 200, 500, 1000, 2000, 5000} {
		if top/s <= 6 {
			return s
		}
	}
	return 10000
}

func log10(d time.Duration) float64 {
	return logf(float64(d)) / logf(10)
}
