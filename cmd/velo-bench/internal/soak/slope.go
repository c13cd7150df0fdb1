package soak

import "time"

// Trends: RSS and goroutines are sampled once a second; after the
// warm-up a leak shows as a steady climb, so the run fits a least-squares
// line to the samples past the warm-up and fails when its slope passes a
// bound. One goroutine leaked per request climbs by thousands a minute;
// a healthy node's count wanders by a few around its floor, which the
// bound leaves room for.

// Sample is one reading of one process.
type Sample struct {
	At         time.Duration `json:"at"` // since the run began
	RSS        int64         `json:"rss"`
	Goroutines int           `json:"goroutines"`
}

// Slope is the least-squares slope of ys against xs (per unit of x), and
// false when there are fewer than three points or no spread in x.
func Slope(xs, ys []float64) (float64, bool) {
	n := float64(len(xs))
	if len(xs) < 3 || len(xs) != len(ys) {
		return 0, false
	}
	var sx, sy, sxx, sxy float64
	for i := range xs {
		sx += xs[i]
		sy += ys[i]
		sxx += xs[i] * xs[i]
		sxy += xs[i] * ys[i]
	}
	d := n*sxx - sx*sx
	if d == 0 {
		return 0, false
	}
	return (n*sxy - sx*sy) / d, true
}

// Bounds are the largest slopes a healthy run may show after warm-up.
type Bounds struct {
	RSSPerMin        float64 // bytes per minute
	GoroutinesPerMin float64
}

// Trend is one process's slopes after warm-up.
type Trend struct {
	Name             string
	Samples          int
	RSSPerMin        float64 // bytes per minute
	GoroutinesPerMin float64
	OK               bool // enough samples to judge
}

// TrendOf fits the samples at or after warmup.
func TrendOf(name string, samples []Sample, warmup time.Duration) Trend {
	var xs, rss, gs []float64
	for _, s := range samples {
		if s.At < warmup {
			continue
		}
		xs = append(xs, s.At.Minutes())
		rss = append(rss, float64(s.RSS))
		gs = append(gs, float64(s.Goroutines))
	}
	t := Trend{Name: name, Samples: len(xs)}
	var ok1, ok2 bool
	t.RSSPerMin, ok1 = Slope(xs, rss)
	t.GoroutinesPerMin, ok2 = Slope(xs, gs)
	t.OK = ok1 && ok2
	return t
}

// Breaks says what of t passes b ("" when nothing does, or when t has
// too few samples to judge).
func (t Trend) Breaks(b Bounds) string {
	switch {
	case !t.OK:
		return ""
	case t.GoroutinesPerMin > b.GoroutinesPerMin:
		return "goroutines"
	case t.RSSPerMin > b.RSSPerMin:
		return "rss"
	}
	return ""
}
