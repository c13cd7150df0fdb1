package soak

import (
	"context"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"time"
)

// The fault schedule: from a seed, a fault on one proxy at a time, every
// Gap on average, each held for a while (pause and blackhole). The
// schedule is the same for a seed; when each fault lands on the wall
// clock is not, so the run records the windows it actually applied.

// FaultKind names a fault.
type FaultKind string

const (
	FaultDrop      FaultKind = "drop"
	FaultPause     FaultKind = "pause"
	FaultBlackhole FaultKind = "blackhole"
	FaultReset     FaultKind = "reset"
)

var faultKinds = []FaultKind{FaultDrop, FaultPause, FaultBlackhole, FaultReset}

// Fault is one planned fault.
type Fault struct {
	Kind  FaultKind
	Proxy int           // which proxy
	After time.Duration // after the previous fault ended
	Hold  time.Duration // pause and blackhole: how long
}

// ParseFaultKinds reads a comma-separated list of fault kinds.
func ParseFaultKinds(s string) ([]FaultKind, error) {
	var out []FaultKind
	for _, k := range strings.Split(s, ",") {
		if !slices.Contains(faultKinds, FaultKind(k)) {
			return nil, fmt.Errorf("unknown fault %q (want drop, pause, blackhole or reset)", k)
		}
		out = append(out, FaultKind(k))
	}
	return out, nil
}

// Plan returns n faults of kinds (nil: all four) over proxies proxies
// from seed, gap the mean pause between them.
func Plan(seed uint64, n, proxies int, gap time.Duration, kinds []FaultKind) []Fault {
	if len(kinds) == 0 {
		kinds = faultKinds
	}
	r := rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))
	out := make([]Fault, n)
	for i := range out {
		f := Fault{Kind: kinds[r.IntN(len(kinds))], Proxy: r.IntN(proxies),
			After: gap/2 + time.Duration(r.Int64N(int64(gap)))}
		if f.Kind == FaultPause || f.Kind == FaultBlackhole {
			f.Hold = 300*time.Millisecond + time.Duration(r.Int64N(int64(1200*time.Millisecond)))
		}
		out[i] = f
	}
	return out
}

// Window is a fault as applied: its wall-clock span.
type Window struct {
	Kind       FaultKind
	From, To   time.Time
	Conns      int // connections it closed
	ProxyIndex int
}

// Injector applies a plan to proxies and records the windows.
type Injector struct {
	mu      sync.Mutex
	windows []Window
}

// Run applies plan until ctx ends or the plan does.
func (in *Injector) Run(ctx context.Context, plan []Fault, proxies []*Proxy) {
	for _, f := range plan {
		select {
		case <-ctx.Done():
			return
		case <-time.After(f.After):
		}
		w := Window{Kind: f.Kind, From: time.Now(), ProxyIndex: f.Proxy}
		p := proxies[f.Proxy%len(proxies)]
		switch f.Kind {
		case FaultDrop:
			w.Conns = p.Drop()
		case FaultReset:
			w.Conns = p.Reset()
		case FaultPause:
			p.Pause()
			hold(ctx, f.Hold)
			p.Resume()
		case FaultBlackhole:
			p.Blackhole()
			hold(ctx, f.Hold)
			w.Conns = p.Unhole()
		}
		w.To = time.Now()
		in.mu.Lock()
		in.windows = append(in.windows, w)
		in.mu.Unlock()
	}
}

func hold(ctx context.Context, d time.Duration) {
	select {
	case <-ctx.Done():
	case <-time.After(d):
	}
}

// Windows returns the faults applied so far.
func (in *Injector) Windows() []Window {
	in.mu.Lock()
	defer in.mu.Unlock()
	return append([]Window(nil), in.windows...)
}

// riskMargin widens a fault's window on both sides: a fire-and-forget
// message sent a little before a drop may still sit in a socket buffer
// when the connection goes, and one sent just after may ride a
// connection the transport has not yet seen die.
const riskMargin = 2 * time.Second

// Faulty is the oracle's view of the windows (see Check).
func (in *Injector) Faulty() Faulty {
	ws := in.Windows()
	return func(from, to int64) bool {
		for _, w := range ws {
			if from <= w.To.Add(riskMargin).UnixMilli() && to >= w.From.Add(-riskMargin).UnixMilli() {
				return true
			}
		}
		return false
	}
}
