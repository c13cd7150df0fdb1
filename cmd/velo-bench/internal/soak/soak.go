// Package soak is the soak driver of velo-bench: nodes in child
// processes run a workload against each other for a tier's duration,
// optionally through fault-injection proxies, while the driver samples
// their RSS and goroutines; at the end an oracle joins what every child
// sent with what every child received, and the run fails on any lost,
// duplicated, reordered or corrupt item, or on a trend past the tier's
// bounds.
package soak

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os/exec"
	"time"

	"github.com/velo-go/velo/ext"
)

// ErrFailed is the error of a run that found loss, duplicates, reorders,
// corruption or a leak (the summary says which).
var ErrFailed = errors.New("soak: the run failed its checks")

// Config is one soak run.
type Config struct {
	Workload  string // messenger, stream, rendezvous or all
	Transport string // tcp, quic or grpc
	Tier      Tier
	Faults    bool
	// FaultKinds limits the faults to these kinds (nil: all four).
	FaultKinds []FaultKind
	Seed       uint64
	Children   int // child processes, at least 2
	// Leak is a test switch: every handler leaks a goroutine.
	Leak bool
	// Lose is a test switch: the unary handler forgets some items.
	Lose bool
	// Progress, when set, gets a progress line redrawn each second.
	Progress io.Writer
	// spawn starts a child (tests start the test binary); nil re-executes
	// this binary.
	spawn func([]string) *exec.Cmd
}

// Point is one second of a workload, for the plot.
type Point struct {
	At       time.Duration
	P50, P99 time.Duration // the worst child's
	RSS      []int64       // by child
}

// WorkloadResult is what one workload showed.
type WorkloadResult struct {
	Name              string
	Verdict           Verdict
	Ops, Items, Bytes int64
	Errors            map[string]int64
	FirstErrors       map[string]string
	Latency           *Hist
	Trends            []Trend
	Breaks            []string // trends past the bounds
	Faults            []Window
	// ProxiedConns and ProxiedBytes are what went through the proxies:
	// proof that the peers reached each other only through them.
	ProxiedConns, ProxiedBytes int64
	Series                     []Point
	Elapsed                    time.Duration
	Warmup                     time.Duration
	runStart                   time.Time
}

// Failed says whether the workload failed a check.
func (w *WorkloadResult) Failed() bool { return w.Verdict.Failed() || len(w.Breaks) > 0 }

// Run runs every workload of cfg, one after the other, each with fresh
// children.
func Run(ctx context.Context, cfg Config) ([]*WorkloadResult, error) {
	names := []string{cfg.Workload}
	if cfg.Workload == "all" {
		names = Workloads
	}
	for _, n := range names {
		if !validWorkload(n) {
			return nil, fmt.Errorf("unknown workload %q (want messenger, stream, rendezvous or all)", n)
		}
	}
	if cfg.Faults && cfg.Transport == "quic" {
		return nil, errors.New("--faults needs a transport over TCP (tcp or grpc): the proxy forwards TCP")
	}
	if cfg.Children < 2 {
		cfg.Children = 2
	}
	var out []*WorkloadResult
	for i, n := range names {
		w, err := runOne(ctx, cfg, n, cfg.Seed+uint64(i))
		if err != nil {
			return out, fmt.Errorf("%s: %w", n, err)
		}
		out = append(out, w)
	}
	for _, w := range out {
		if w.Failed() {
			return out, ErrFailed
		}
	}
	return out, nil
}

func validWorkload(n string) bool {
	for _, w := range Workloads {
		if w == n {
			return true
		}
	}
	return false
}

// run is one workload's children, proxies and faults.
type run struct {
	cfg     Config
	name    string
	seed    uint64
	procs   []*proc
	proxies []*Proxy
	inject  Injector
	res     *WorkloadResult
	samples [][]Sample
}

func runOne(parent context.Context, cfg Config, name string, seed uint64) (*WorkloadResult, error) {
	ctx, fail := context.WithCancelCause(parent)
	defer fail(nil)
	ctx, cancel := context.WithTimeout(ctx, cfg.Tier.Duration+2*time.Minute)
	defer cancel()
	r := &run{cfg: cfg, name: name, seed: seed, res: &WorkloadResult{Name: name, Errors: map[string]int64{}, FirstErrors: map[string]string{}, Latency: &Hist{}, Warmup: cfg.Tier.Warmup}}
	defer r.close()
	if err := r.start(ctx, fail); err != nil {
		return nil, err
	}
	if err := r.drive(ctx); err != nil {
		return nil, err
	}
	if err := r.finish(ctx); err != nil {
		return nil, err
	}
	return r.res, nil
}

// start starts the children and the proxies and introduces them.
func (r *run) start(ctx context.Context, fail context.CancelCauseFunc) error {
	infos := make([]ext.PeerInfo, r.cfg.Children)
	for i := 0; i < r.cfg.Children; i++ {
		p, err := startProc(ctx, fmt.Sprintf("child %d", i), r.cfg.spawn, fail)
		if err != nil {
			return err
		}
		r.procs = append(r.procs, p)
		cc := ChildConfig{Workload: r.name, Transport: r.cfg.Transport, Index: i, Seed: r.seed,
			Timeout: 3 * time.Second, Rate: r.cfg.Tier.Rates[r.name], Leak: r.cfg.Leak, Lose: r.cfg.Lose}
		if r.cfg.Faults {
			if err := r.proxied(&cc); err != nil {
				return err
			}
		}
		if err := p.send(msg{Op: "config", Config: &cc}); err != nil {
			return err
		}
	}
	for i, p := range r.procs {
		m, err := p.recv(ctx, "hello")
		if err != nil {
			return err
		}
		if m.Peer == nil {
			return fmt.Errorf("%s: a hello without a PeerInfo", p.name)
		}
		infos[i] = *m.Peer
	}
	for i, p := range r.procs {
		var peers []ext.PeerInfo
		for j, info := range infos {
			if j != i {
				peers = append(peers, info)
			}
		}
		if err := p.send(msg{Op: "peers", Peers: peers}); err != nil {
			return err
		}
	}
	for _, p := range r.procs {
		if _, err := p.recv(ctx, "ready"); err != nil {
			return err
		}
	}
	return nil
}

// proxied puts a fault proxy in front of a child-to-be: the child will
// listen on a port picked here and advertise the proxy's, so every dial
// and every re-dial after a fault goes through the proxy.
func (r *run) proxied(cc *ChildConfig) error {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return err
	}
	listen := ln.Addr().String()
	ln.Close() // the child binds it next; a race with another binder fails the run loudly
	p, err := NewProxy(listen)
	if err != nil {
		return err
	}
	r.proxies = append(r.proxies, p)
	cc.ListenAddr, cc.AdvertiseAddr = listen, p.Addr()
	return nil
}

// drive runs the workload for the tier's duration, sampling each second
// and applying the faults.
func (r *run) drive(ctx context.Context) error {
	for _, p := range r.procs {
		if err := p.send(msg{Op: "run"}); err != nil {
			return err
		}
	}
	r.samples = make([][]Sample, len(r.procs))
	begin := time.Now()
	r.res.runStart = begin
	fctx, stopFaults := context.WithCancel(ctx)
	faultsDone := make(chan struct{})
	go func() {
		defer close(faultsDone)
		if r.cfg.Faults {
			n := int(r.cfg.Tier.Duration/r.cfg.Tier.FaultGap) + 1
			r.inject.Run(fctx, Plan(r.seed, n, len(r.proxies), r.cfg.Tier.FaultGap, r.cfg.FaultKinds), r.proxies)
		}
	}()
	t := time.NewTicker(time.Second)
	defer t.Stop()
	for time.Since(begin) < r.cfg.Tier.Duration {
		select {
		case <-ctx.Done():
			stopFaults()
			<-faultsDone
			return context.Cause(ctx)
		case <-t.C:
		}
		r.sample(time.Since(begin))
	}
	stopFaults()
	<-faultsDone
	// Whatever the last fault held is let go before the drain.
	for _, p := range r.proxies {
		p.Resume()
		p.Unhole()
	}
	for _, p := range r.proxies {
		r.res.ProxiedConns += p.Accepted.Load()
		r.res.ProxiedBytes += p.Forwarded.Load()
	}
	r.res.Elapsed = time.Since(begin)
	r.res.Faults = r.inject.Windows()
	if r.cfg.Progress != nil {
		fmt.Fprintln(r.cfg.Progress)
	}
	return nil
}

// sample reads every child's RSS and its last tick.
func (r *run) sample(at time.Duration) {
	pt := Point{At: at}
	var ops, errs int64
	for i, p := range r.procs {
		tk, ok := p.lastTick()
		rss := p.rss()
		pt.RSS = append(pt.RSS, rss)
		if !ok {
			continue
		}
		r.samples[i] = append(r.samples[i], Sample{At: at, RSS: rss, Goroutines: tk.Goroutines})
		pt.P50 = max(pt.P50, time.Duration(tk.P50))
		pt.P99 = max(pt.P99, time.Duration(tk.P99))
		ops += tk.Ops
		errs += tk.Errors
	}
	r.res.Series = append(r.res.Series, pt)
	if r.cfg.Progress != nil {
		drawProgress(r.cfg.Progress, r.name, at, r.cfg.Tier.Duration, ops, errs, len(r.inject.Windows()))
	}
}

// finish stops the children, collects their ledgers and judges.
func (r *run) finish(ctx context.Context) error {
	for _, p := range r.procs {
		if err := p.send(msg{Op: "stop"}); err != nil {
			return err
		}
	}
	for _, p := range r.procs {
		if _, err := p.recv(ctx, "stopped"); err != nil {
			return err
		}
	}
	var sent []SentKey
	var got []GotKey
	for _, p := range r.procs {
		if err := p.send(msg{Op: "report"}); err != nil {
			return err
		}
		m, err := p.recv(ctx, "report")
		if err != nil {
			return err
		}
		l := m.Report
		if l == nil {
			return fmt.Errorf("%s: a report without a ledger", p.name)
		}
		sent, got = append(sent, l.Sent...), append(got, l.Got...)
		r.res.Ops += l.Ops
		r.res.Items += l.Items
		r.res.Bytes += l.Bytes
		for k, v := range l.Errors {
			r.res.Errors[k] += v
		}
		for k, v := range l.FirstErrors {
			if _, ok := r.res.FirstErrors[k]; !ok {
				r.res.FirstErrors[k] = v
			}
		}
		if l.Latency != nil {
			r.res.Latency.Merge(l.Latency)
		}
	}
	for _, p := range r.procs {
		p.leaving.Store(true)
		p.send(msg{Op: "exit"})
	}
	var faulty Faulty
	if r.cfg.Faults {
		faulty = r.inject.Faulty()
	}
	r.res.Verdict = Check(sent, got, faulty)
	for i, p := range r.procs {
		t := TrendOf(p.name, r.samples[i], r.cfg.Tier.Warmup)
		r.res.Trends = append(r.res.Trends, t)
		if b := r.cfg.Tier.Bounds; b != nil {
			if what := t.Breaks(*b); what != "" {
				r.res.Breaks = append(r.res.Breaks, p.name+" "+what)
			}
		}
	}
	return nil
}

// close ends whatever is left: children (waiting for their exit) and
// proxies.
func (r *run) close() {
	for _, p := range r.procs {
		p.leaving.Store(true)
		// A child still waiting for the driver reads EOF and ends.
		p.stdin.Close()
		select {
		case <-p.exited:
		case <-time.After(10 * time.Second):
		}
		p.kill()
	}
	for _, p := range r.proxies {
		p.Close()
	}
}
