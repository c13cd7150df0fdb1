package soak

import (
	"math"
	"math/rand/v2"
	"testing"
	"time"
)

func TestSlopeOfALine(t *testing.T) {
	xs := []float64{0, 1, 2, 3, 4}
	ys := []float64{3, 5, 7, 9, 11}
	if s, ok := Slope(xs, ys); !ok || math.Abs(s-2) > 1e-9 {
		t.Fatalf("slope %v %v, want 2", s, ok)
	}
	if _, ok := Slope(xs[:2], ys[:2]); ok {
		t.Fatal("two points judged")
	}
}

// series is a ci-tier run's samples: a second apart for 40 s, RSS and
// goroutines from fn.
func series(fn func(i int, r *rand.Rand) (rss int64, g int)) []Sample {
	r := rand.New(rand.NewPCG(3, 4))
	var out []Sample
	for i := 0; i < 40; i++ {
		rss, g := fn(i, r)
		out = append(out, Sample{At: time.Duration(i) * time.Second, RSS: rss, Goroutines: g})
	}
	return out
}

// A healthy child wanders: its goroutine floor steps by a few when a
// fault makes it re-dial, and GC moves its RSS by megabytes. The ci
// bounds pass it.
func TestBoundsPassAHealthyRun(t *testing.T) {
	s := series(func(i int, r *rand.Rand) (int64, int) {
		g := 60 + r.IntN(6)
		if i%7 == 3 {
			g += 8 // a re-dial in flight
		}
		return 40*mib + int64(r.IntN(6*mib)), g
	})
	tr := TrendOf("healthy", s, 15*time.Second)
	if what := tr.Breaks(ciBounds); what != "" {
		t.Fatalf("a healthy run broke %s: %+v", what, tr)
	}
}

// One goroutine leaked per request, at the messenger workload's lowest
// rate (a few hundred a second), and even at one leaked per hundred
// requests, breaks the goroutine bound; the stacks alone break the RSS
// bound.
func TestBoundsCatchALeakPerRequest(t *testing.T) {
	for _, perSec := range []int{600, 6} {
		s := series(func(i int, r *rand.Rand) (int64, int) {
			g := 60 + r.IntN(6) + perSec*i
			return 40*mib + int64(r.IntN(6*mib)) + int64(perSec*i)*8<<10, g
		})
		tr := TrendOf("leaky", s, 15*time.Second)
		if what := tr.Breaks(ciBounds); what != "goroutines" {
			t.Fatalf("a leak of %d goroutines/s: broke %q, want goroutines: %+v", perSec, what, tr)
		}
		tr.GoroutinesPerMin = 0
		if perSec == 600 && tr.Breaks(ciBounds) != "rss" {
			t.Fatalf("the leak's stacks did not break the RSS bound: %+v", tr)
		}
	}
}
