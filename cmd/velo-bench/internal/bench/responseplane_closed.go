package bench

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"runtime"
	"slices"
	"sync"
	"sync/atomic"
	"time"
)

// The closed loop of a response-plane run (Concurrency > 0): the shape of
// a server under steady load rather than a burst. Each frontend keeps its
// share of Concurrency requests open; a slot starts its next request the
// moment the consumer of its last one read the terminal. The run warms up
// for Warmup, measures for Duration, then stops dispatching and drains.
//
// Request indexes stay unique over the run so that the token checks of
// the batch mode apply unchanged: frontend h's k-th request is h +
// k*AnchorHosts and goes to engine (h+k) % Engines, round-robin over all
// engines from every frontend whatever the two counts are.

// rpLog is where a run reports the requests that failed without failing
// it.
var rpLog io.Writer = os.Stderr

// rpLoad is the closed loop of the frontends of one process, on the clock
// now that the engines stamp their tokens with. The window [warm, end) is
// on that clock too.
type rpLoad struct {
	cfg       ResponsePlaneConfig
	now       func() int64
	warm, end int64

	mu     sync.Mutex
	done   []rpDone // requests read whole
	errs   int
	errMsg string // the first failed request's error, for the report
}

// rpDone is one request read whole.
type rpDone struct {
	dispatched, first, finished int64
	// tokLat is kept only for requests dispatched in the window: the
	// steady-state token latency leaves out the warm-up's ramp.
	tokLat []int64
}

func newRPLoad(cfg ResponsePlaneConfig, now func() int64, warm, end int64) *rpLoad {
	return &rpLoad{cfg: cfg, now: now, warm: warm, end: end}
}

// share is frontend h's part of the concurrency: the remainder goes to
// the first frontends.
func (c ResponsePlaneConfig) share(h int) int {
	n := c.Concurrency / c.AnchorHosts
	if h < c.Concurrency%c.AnchorHosts {
		n++
	}
	return n
}

// rpDispatchFunc hands request i, opened on a frontend, to engine e.
type rpDispatchFunc func(ctx context.Context, i, e int, req any) error

// front runs the slots of global frontend h, which is fronts' frontend
// local, until the window's end, and returns once each slot's last
// request is read whole (or failed).
func (l *rpLoad) front(ctx context.Context, fronts rpFrontends, local, h int, dispatch rpDispatchFunc) {
	var next atomic.Int64
	var slots sync.WaitGroup
	n := l.cfg.share(h)
	for s := range n {
		slots.Add(1)
		go func() {
			defer slots.Done()
			if !l.ramp(ctx, s, n) {
				return
			}
			for ctx.Err() == nil && l.now() < l.end {
				k := int(next.Add(1) - 1)
				i, e := h+k*l.cfg.AnchorHosts, (h+k)%l.cfg.Engines
				if !l.request(ctx, fronts, i, local, e, dispatch) {
					return
				}
			}
		}()
	}
	slots.Wait()
}

// ramp waits until slot s of n may open its first request: the slots
// start spread evenly over the first half of the warm-up. Were they to
// start at once, with Concurrency at the engines' batch capacity every
// request would be admitted in the same pass and finish in the same pass,
// forever: completions would come in waves of Concurrency, and a window
// would count whole waves. Spread starts put the requests at different
// phases, as a server's arrivals are.
func (l *rpLoad) ramp(ctx context.Context, s, n int) bool {
	at := l.warm - int64(l.cfg.Warmup) + int64(l.cfg.Warmup/2)*int64(s)/int64(n)
	return sleepCtx(ctx, time.Duration(at-l.now()))
}

// sleepCtx waits d (no time when d <= 0) and reports true, or false when
// ctx ends first.
func sleepCtx(ctx context.Context, d time.Duration) bool {
	if d <= 0 {
		return ctx.Err() == nil
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	}
}

// request opens, dispatches and reads request i. A request that fails is
// counted, not fatal; it returns false when the slot cannot go on (the
// run ended, or the request could not be opened or dispatched, so
// another try would fail the same way).
func (l *rpLoad) request(ctx context.Context, fronts rpFrontends, i, h, e int, dispatch rpDispatchFunc) bool {
	d := &rpDone{dispatched: l.now()}
	if d.dispatched >= l.warm {
		d.tokLat = make([]int64, l.cfg.Tokens)
	}
	read := make(chan error, 1)
	req, err := fronts.open(ctx, i, h, e, func(next func() ([]byte, error)) error {
		err := l.read(i, d, next)
		read <- err
		return err
	})
	if err == nil {
		err = dispatch(ctx, i, e, req)
	}
	if err != nil {
		if ctx.Err() == nil {
			l.failed(fmt.Errorf("request %d: %w", i, err))
		}
		return false
	}
	select {
	case err = <-read:
	case <-ctx.Done():
		return false
	}
	if err != nil {
		l.failed(err)
		return true
	}
	l.mu.Lock()
	l.done = append(l.done, *d)
	l.mu.Unlock()
	return true
}

func (l *rpLoad) failed(err error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.errs == 0 {
		l.errMsg = err.Error()
	}
	l.errs++
}

// read reads request i's response with the batch mode's checks and
// records its times in d.
func (l *rpLoad) read(i int, d *rpDone, next func() ([]byte, error)) error {
	T := l.cfg.Tokens
	for pos := 0; ; pos++ {
		p, err := next()
		if errors.Is(err, io.EOF) {
			if pos != T {
				return fmt.Errorf("request %d: %d tokens, want %d", i, pos, T)
			}
			d.finished = l.now()
			return nil
		}
		if err != nil {
			return fmt.Errorf("request %d, token %d: %w", i, pos, err)
		}
		at := l.now()
		if pos >= T {
			return fmt.Errorf("request %d: more than %d tokens", i, T)
		}
		stamp, err := rpCheckToken(i, pos, p)
		if err != nil {
			return err
		}
		if pos == 0 {
			d.first = at
		}
		if d.tokLat != nil {
			d.tokLat[pos] = at - stamp
		}
	}
}

// rpLoadSummary is what a closed loop measured, in a form that adds up
// over processes.
type rpLoadSummary struct {
	// Finished is the requests read whole inside the window, Completed
	// those over the whole run, Errors the requests that failed.
	Finished  int    `json:"finished"`
	Completed int    `json:"completed"`
	Errors    int    `json:"errors"`
	FirstErr  string `json:"first_err,omitempty"`
	// TTFT and TokLat (nanoseconds) are of the requests dispatched in
	// the window.
	TTFT   []int64 `json:"ttft,omitempty"`
	TokLat []int64 `json:"tok_lat,omitempty"`
}

func (l *rpLoad) summary() rpLoadSummary {
	l.mu.Lock()
	defer l.mu.Unlock()
	s := rpLoadSummary{Completed: len(l.done), Errors: l.errs, FirstErr: l.errMsg}
	for _, d := range l.done {
		if d.finished >= l.warm && d.finished < l.end {
			s.Finished++
		}
		if d.tokLat != nil {
			s.TTFT = append(s.TTFT, d.first-d.dispatched)
			s.TokLat = append(s.TokLat, d.tokLat...)
		}
	}
	return s
}

func (s rpLoadSummary) add(o rpLoadSummary) rpLoadSummary {
	if s.FirstErr == "" {
		s.FirstErr = o.FirstErr
	}
	s.Finished, s.Completed, s.Errors = s.Finished+o.Finished, s.Completed+o.Completed, s.Errors+o.Errors
	s.TTFT, s.TokLat = append(s.TTFT, o.TTFT...), append(s.TokLat, o.TokLat...)
	return s
}

// rpWindowCPU takes the CPU of this process at the window's two ends,
// from and to on the clock now, and returns what it used in between;
// the result is ready once done is closed.
type rpWindowCPU struct {
	done chan struct{}
	cpu  time.Duration
}

func watchWindowCPU(ctx context.Context, now func() int64, from, to int64) *rpWindowCPU {
	w := &rpWindowCPU{done: make(chan struct{})}
	go func() {
		defer close(w.done)
		wait := func(at int64) bool { return sleepCtx(ctx, time.Duration(at-now())) }
		if !wait(from) {
			return
		}
		c0 := processCPU()
		if !wait(to) {
			return
		}
		w.cpu = processCPU() - c0
	}()
	return w
}

// responsePlaneClosedRun is one arm of one rep of the closed loop with
// every frontend and engine in this process.
func responsePlaneClosedRun(cfg ResponsePlaneConfig, arm string, params map[string]any, r *Report) error {
	ctx, cancel := context.WithTimeoutCause(context.Background(), cfg.Timeout, errors.New("run timed out"))
	defer cancel()
	ctx, fail := context.WithCancelCause(ctx)
	defer fail(nil)
	plane, err := newPlane(ctx, cfg, arm)
	if err != nil {
		return err
	}
	defer plane.close()

	base := time.Now()
	now := func() int64 { return int64(time.Since(base)) }
	// Never more than Concurrency requests are open, so a queue that
	// holds them all never blocks the frontend.
	queues := make([]chan rpQueued, cfg.Engines)
	for e := range queues {
		queues[e] = make(chan rpQueued, cfg.Concurrency)
	}
	var engines sync.WaitGroup
	for e := range cfg.Engines {
		engines.Add(1)
		go func() {
			defer engines.Done()
			if err := rpEngine(ctx, cfg, plane, e, queues[e], now); err != nil {
				fail(fmt.Errorf("engine %d: %w", e, err))
			}
		}()
	}
	runtime.GC()
	start := now()
	load := newRPLoad(cfg, now, start+int64(cfg.Warmup), start+int64(cfg.Warmup+cfg.Duration))
	win := watchWindowCPU(ctx, now, load.warm, load.end)
	dispatch := func(ctx context.Context, i, e int, req any) error {
		select {
		case queues[e] <- rpQueued{idx: i, req: req}:
			return nil
		case <-ctx.Done():
			return context.Cause(ctx)
		}
	}
	var fronts sync.WaitGroup
	for h := range cfg.AnchorHosts {
		fronts.Add(1)
		go func() {
			defer fronts.Done()
			load.front(ctx, plane, h, h, dispatch)
		}()
	}
	fronts.Wait()
	for _, q := range queues {
		close(q)
	}
	engines.Wait()
	<-win.done
	if err := context.Cause(ctx); err != nil {
		return err
	}
	sum := load.summary()
	if vp, ok := plane.(*veloPlane); ok {
		if err := checkAttaches(vp.attachTaps != nil, vp.veloEngines.zeroRTT, vp.attaches(), sum.Completed); err != nil {
			return err
		}
	}
	return addRPClosedResult(r, cfg, arm, params, sum, win.cpu, 0, false)
}

// addRPClosedResult adds the figures of one arm's rep of the closed loop:
// with procs, frontCPU and engineCPU are each side's processes, else
// frontCPU is the whole process.
func addRPClosedResult(r *Report, cfg ResponsePlaneConfig, arm string, params map[string]any, s rpLoadSummary, frontCPU, engineCPU time.Duration, procs bool) error {
	if s.Completed == 0 {
		return fmt.Errorf("no request completed (%d failed; the first: %s)", s.Errors, s.FirstErr)
	}
	if s.Finished == 0 || len(s.TTFT) == 0 {
		return fmt.Errorf("no request finished in the window (%d over the run): make --duration longer", s.Completed)
	}
	if s.Errors > 0 {
		// Reported, not fatal: the figure says how many.
		fmt.Fprintf(rpLog, "response-plane %s: %d requests failed; the first: %s\n", arm, s.Errors, s.FirstErr)
	}
	add := func(metric, unit string, v float64) { r.Add(responsePlaneHarness, arm, metric, unit, v, params) }
	secs, n := cfg.Duration.Seconds(), float64(s.Finished)
	perReq := func(d time.Duration) float64 { return float64(d.Nanoseconds()) / n / 1e3 }
	add("requests_per_s", "per_s", n/secs)
	add("tokens_per_s", "per_s", n*float64(cfg.Tokens)/secs)
	add("requests_completed_count", "count", float64(s.Completed))
	add("errors_count", "count", float64(s.Errors))
	add("cpu_us_per_request", "us", perReq(frontCPU+engineCPU))
	add("frontend_cpu_us_per_request", "us", perReq(frontCPU))
	if procs {
		add("engine_cpu_us_per_request", "us", perReq(engineCPU))
	}
	if cfg.Samples != nil {
		cfg.Samples.add(arm, s.TTFT, s.TokLat)
	}
	qs := []float64{0.5, 0.9, 0.99}
	addQuantiles(r, arm, "ttft_", "ms", 1e6, s.TTFT, qs, params)
	addQuantiles(r, arm, "token_latency_", "us", 1e3, s.TokLat, qs, params)
	return nil
}

// addRPClosedRatios adds the closed loop's ratios, paired by rep.
func addRPClosedRatios(r *Report, cfg ResponsePlaneConfig, params map[string]any) {
	for _, pair := range [][2]string{{"mux", "grpc"}, {"mux", "raw"}, {"mux-zero-rtt", "mux"}} {
		if !slices.Contains(cfg.Arms, pair[0]) || !slices.Contains(cfg.Arms, pair[1]) {
			continue
		}
		for _, metric := range []string{"frontend_cpu_us_per_request", "requests_per_s"} {
			num, _ := r.Find(responsePlaneHarness, pair[0], metric, params)
			den, _ := r.Find(responsePlaneHarness, pair[1], metric, params)
			r.Ratio(responsePlaneHarness, pair[0]+"/"+pair[1], metric+"_ratio", num, den, params)
		}
	}
}
