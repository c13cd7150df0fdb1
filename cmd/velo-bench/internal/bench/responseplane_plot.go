package bench

import (
	"fmt"
	"image/color"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/font"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/plotutil"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
	_ "gonum.org/v1/plot/vg/vgimg" // png
	_ "gonum.org/v1/plot/vg/vgsvg" // svg
)

// The --plot output of the response-plane harness: two panels side by
// side in one file, the TTFT CDF on the left and the token-latency CDF on
// the right, one line per arm, each arm's samples pooled over its reps.
// The x axes are logarithmic, since the arms' tails differ by orders of
// magnitude, and the y axis is the fraction of samples at or below x.

// cdfPoints caps the points drawn per line: a CDF of 400,000 samples
// drawn point by point would make a large file and look no different.
const cdfPoints = 2000

// PlotFormat returns the image format a --plot path asks for by its
// extension: "png" or "svg".
func PlotFormat(path string) (string, error) {
	switch ext := strings.ToLower(filepath.Ext(path)); ext {
	case ".png", ".svg":
		return ext[1:], nil
	default:
		return "", fmt.Errorf("plot %q: want a .png or .svg file", path)
	}
}

// WriteResponsePlanePlot draws the CDFs of s into path (PNG or SVG, by
// extension). title goes above each panel.
func WriteResponsePlanePlot(path, title string, s *ResponsePlaneSamples) error {
	format, err := PlotFormat(path)
	if err != nil {
		return err
	}
	if s == nil || len(s.Arms) == 0 {
		return fmt.Errorf("plot %q: no samples", path)
	}
	ttft, err := cdfPanel("TTFT", "time to first token (ms)", 1e6, s.Arms, s.TTFT)
	if err != nil {
		return err
	}
	tok, err := cdfPanel("token latency", "engine stamps token → consumer reads it (µs)", 1e3, s.Arms, s.TokenLatency)
	if err != nil {
		return err
	}
	const w, h = 28 * vg.Centimeter, 13 * vg.Centimeter
	c, err := draw.NewFormattedCanvas(w, h, format)
	if err != nil {
		return err
	}
	dc := draw.New(c)
	// The run's description goes once, across the top of both panels.
	top := vg.Millimeter * 2
	if title != "" {
		sty := draw.TextStyle{Color: color.Black, Font: font.From(plot.DefaultFont, 11),
			XAlign: draw.XCenter, YAlign: draw.YTop, Handler: plot.DefaultTextHandler}
		dc.FillText(sty, vg.Point{X: w / 2, Y: h - top}, title)
		top += sty.Height(title) + vg.Millimeter*2
	}
	tiles := draw.Tiles{Cols: 2, Rows: 1, PadX: vg.Centimeter, PadTop: top,
		PadBottom: vg.Millimeter * 2, PadLeft: vg.Millimeter * 2, PadRight: vg.Millimeter * 4}
	plots := [][]*plot.Plot{{ttft, tok}}
	canvases := plot.Align(plots, tiles, dc)
	for j, p := range plots[0] {
		p.Draw(canvases[0][j])
	}
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	if _, err := c.WriteTo(f); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

// cdfPanel is one panel: the empirical CDF of each arm's samples (ns),
// divided by div for the axis unit.
func cdfPanel(title, xlabel string, div float64, arms []string, byArm map[string][]int64) (*plot.Plot, error) {
	p := plot.New()
	p.Title.Text = title + " CDF"
	p.X.Label.Text = xlabel
	p.Y.Label.Text = "fraction ≤ x"
	p.X.Scale = plot.LogScale{}
	p.X.Tick.Marker = plot.LogTicks{Prec: -1}
	p.Y.Min, p.Y.Max = 0, 1
	p.Legend.Top, p.Legend.Left = true, true
	p.Legend.XOffs, p.Legend.YOffs = vg.Millimeter*3, -vg.Millimeter*3
	p.Add(plotter.NewGrid())
	// The smallest positive value stands in for zeros, which a log axis
	// cannot show (a clock step of 0 ns between stamp and read).
	floor := math.Inf(1)
	for _, arm := range arms {
		for _, v := range byArm[arm] {
			if v > 0 && float64(v)/div < floor {
				floor = float64(v) / div
			}
		}
	}
	if math.IsInf(floor, 1) {
		floor = 1 / div
	}
	for i, arm := range arms {
		ns := byArm[arm]
		if len(ns) == 0 {
			continue
		}
		line, err := plotter.NewLine(cdfXYs(ns, div, floor))
		if err != nil {
			return nil, fmt.Errorf("%s, arm %s: %w", title, arm, err)
		}
		line.Color = plotutil.Color(i)
		line.Dashes = plotutil.Dashes(i)
		line.Width = vg.Points(1.5)
		p.Add(line)
		p.Legend.Add(arm, line)
	}
	return p, nil
}

// cdfXYs is the empirical CDF of ns as at most cdfPoints+1 points: x the
// value (divided by div, at least floor), y the fraction of samples at or
// below it.
func cdfXYs(ns []int64, div, floor float64) plotter.XYs {
	s := slices.Clone(ns)
	slices.Sort(s)
	n := len(s)
	step := max(1, n/cdfPoints)
	xys := make(plotter.XYs, 0, n/step+2)
	for i := 0; i < n; i += step {
		xys = append(xys, plotter.XY{X: max(float64(s[i])/div, floor), Y: float64(i+1) / float64(n)})
	}
	if last := xys[len(xys)-1]; last.Y < 1 {
		xys = append(xys, plotter.XY{X: max(float64(s[n-1])/div, floor), Y: 1})
	}
	return xys
}
