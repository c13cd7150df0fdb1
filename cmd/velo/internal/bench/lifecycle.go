package bench

import (
	"context"
	"errors"
	"fmt"
	"io"
	"runtime"
	"slices"
	"sync"
	"time"

	"github.com/velo-go/velo"
	"github.com/velo-go/velo/ext"
	"github.com/velo-go/velo/streaming"
)

// StreamLifecycleModes are the arms of the stream-lifecycle harness: what
// the producer does after Finalize. Each rep runs them in rotated order.
//
//   - plain: move on after Finalize;
//   - retired: await Sender.Retired() taken after Finalize, the usual Go
//     form (a known outcome gives a shared closed channel);
//   - retired-early: take Retired() before the first send and await it
//     after Finalize (one channel made per stream).
var StreamLifecycleModes = []string{"plain", "retired", "retired-early"}

// StreamLifecyclePaths are the stream paths the harness can run on.
var StreamLifecyclePaths = []string{"same-worker", "per-stream"}

// StreamLifecycleConfig sets the stream-lifecycle harness (the book's
// stream_lifecycle).
type StreamLifecycleConfig struct {
	Path        string   // same-worker or per-stream
	Modes       []string // arms, from StreamLifecycleModes
	Streams     int      // measured lifecycles per arm and rep
	Concurrency int      // goroutines running lifecycles at once
	Items       int      // items of Payload bytes in each stream
	Payload     int
	Warmup      int // lifecycles per arm and rep before the measured run
	Reps        int
}

// Validate reports a config that cannot run.
func (c StreamLifecycleConfig) Validate() error {
	if !slices.Contains(StreamLifecyclePaths, c.Path) {
		return fmt.Errorf("unknown path %q (want %v)", c.Path, StreamLifecyclePaths)
	}
	if len(c.Modes) == 0 {
		return errors.New("no mode to run")
	}
	for _, m := range c.Modes {
		if m == "ack" {
			return errors.New("mode ack is not built yet (plain, retired)")
		}
		if !slices.Contains(StreamLifecycleModes, m) {
			return fmt.Errorf("unknown mode %q (want %v)", m, StreamLifecycleModes)
		}
	}
	if c.Streams < 1 || c.Concurrency < 1 || c.Items < 0 || c.Payload < 0 || c.Warmup < 0 || c.Reps < 1 {
		return errors.New("streams, concurrency and reps must be positive; items, payload and warmup not negative")
	}
	return nil
}

const streamLifecycleHarness = "stream-lifecycle"

// lifecycleEnds are the two managers of a run: the consumer's, which owns
// the anchors, and the producer's, which attaches. They are the same
// manager on the same-worker path, and two velo nodes' Streams on the
// per-stream path.
type lifecycleEnds struct {
	consumer, producer *streaming.Manager
	stop               func()
}

func startLifecycleEnds(ctx context.Context, path string) (*lifecycleEnds, error) {
	if path == "same-worker" {
		m := streaming.NewManager(ext.NewInstanceID().WorkerID())
		return &lifecycleEnds{consumer: m, producer: m, stop: func() { m.Close() }}, nil
	}
	start := func() (*velo.Node, error) {
		tr, err := NewTransport("tcp")
		if err != nil {
			return nil, err
		}
		return velo.New(ctx, velo.WithTransport(tr))
	}
	a, err := start()
	if err != nil {
		return nil, err
	}
	b, err := start()
	if err != nil {
		shutdownWithin(a, 5*time.Second)
		return nil, err
	}
	stop := func() {
		shutdownWithin(a, 5*time.Second)
		shutdownWithin(b, 5*time.Second)
	}
	if err := a.RegisterPeer(b.PeerInfo()); err != nil {
		stop()
		return nil, err
	}
	return &lifecycleEnds{consumer: b.Streams, producer: a.Streams, stop: stop}, nil
}

// streamLifecycle is one stream end to end: the consumer creates an
// anchor, the producer attaches, sends items, finalizes and, in mode
// retired*, awaits Retired(); then the consumer reads to the end. It
// returns how long the producer held the stream after Finalize (the
// clock's own cost in mode plain).
func streamLifecycle(ctx context.Context, e *lifecycleEnds, mode string, items int, payload []byte) (time.Duration, error) {
	a, err := streaming.CreateAnchor[[]byte](e.consumer)
	if err != nil {
		return 0, err
	}
	defer a.Close()
	s, err := streaming.AttachAnchor[[]byte](ctx, e.producer, a.Handle())
	if err != nil {
		return 0, err
	}
	defer s.Close()
	var retired <-chan struct{}
	if mode == "retired-early" {
		retired = s.Retired() // taken before the end: a channel of its own
	}
	for range items {
		if err := s.SendBytes(ctx, payload); err != nil {
			return 0, err
		}
	}
	if err := s.Finalize(); err != nil {
		return 0, err
	}
	// Both modes read the clock here and after the wait, so the arms
	// differ by the wait alone.
	t := time.Now()
	if mode == "retired" {
		retired = s.Retired()
	}
	if retired != nil {
		select {
		case <-retired:
			if out := s.Outcome(); out != streaming.RetireSent {
				return 0, fmt.Errorf("retired %v, want %v", out, streaming.RetireSent)
			}
		case <-ctx.Done():
			return 0, ctx.Err()
		}
	}
	held := time.Since(t)
	for i := 0; ; i++ {
		_, err := a.NextBytes(ctx)
		if err == io.EOF {
			if i != items {
				return 0, fmt.Errorf("read %d items, want %d", i, items)
			}
			return held, nil
		}
		if err != nil {
			return 0, err
		}
	}
}

// StreamLifecycle runs short streams on one path, each mode an arm. Both
// ends live in this process; on the per-stream path they are two velo
// nodes on loopback TCP, and each stream opens its own connection. Each
// arm and rep runs Warmup lifecycles, then Streams lifecycles from
// Concurrency goroutines, and reports lifecycles per second, latency
// percentiles of one lifecycle, process CPU (getrusage user+sys, GC
// included) per lifecycle, and how long the producer held the stream
// after Finalize. cpu_us_per_lifecycle_ratio is retired/plain,
// paired by rep.
func StreamLifecycle(cfg StreamLifecycleConfig, r *Report) error {
	if err := cfg.Validate(); err != nil {
		return err
	}
	ctx := context.Background()
	e, err := startLifecycleEnds(ctx, cfg.Path)
	if err != nil {
		return err
	}
	defer e.stop()
	params := map[string]any{"path": cfg.Path, "streams": cfg.Streams, "concurrency": cfg.Concurrency,
		"items": cfg.Items, "procs": runtime.GOMAXPROCS(0)}
	payload := make([]byte, cfg.Payload)
	for rep := 0; rep < cfg.Reps; rep++ {
		for _, mode := range rotated(cfg.Modes, rep) {
			if err := lifecycleArm(ctx, e, cfg, mode, payload, params, r); err != nil {
				return fmt.Errorf("%s: %w", mode, err)
			}
		}
	}
	for _, arm := range []string{"retired", "retired-early"} {
		if slices.Contains(cfg.Modes, "plain") && slices.Contains(cfg.Modes, arm) {
			lifecycleRatios(r, arm, params)
		}
	}
	return nil
}

// lifecycleRatios adds arm/plain ratios of CPU and rate, paired by rep.
func lifecycleRatios(r *Report, arm string, params map[string]any) {
	for _, metric := range []string{"cpu_us_per_lifecycle", "lifecycles_per_s"} {
		num, _ := r.Find(streamLifecycleHarness, arm, metric, params)
		den, _ := r.Find(streamLifecycleHarness, "plain", metric, params)
		r.Ratio(streamLifecycleHarness, arm+"/plain", metric+"_ratio", num, den, params)
	}
}

func lifecycleArm(ctx context.Context, e *lifecycleEnds, cfg StreamLifecycleConfig, mode string, payload []byte, params map[string]any, r *Report) error {
	for range cfg.Warmup {
		if _, err := streamLifecycle(ctx, e, mode, cfg.Items, payload); err != nil {
			return err
		}
	}
	lat := make([]time.Duration, cfg.Streams)
	held := make([]time.Duration, cfg.Streams)
	errs := make([]error, cfg.Concurrency)
	var next sync.Mutex
	n := 0
	take := func() int {
		next.Lock()
		defer next.Unlock()
		if n == cfg.Streams {
			return -1
		}
		n++
		return n - 1
	}
	runtime.GC()
	var wg sync.WaitGroup
	start := make(chan struct{})
	for i := range cfg.Concurrency {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			for j := take(); j >= 0; j = take() {
				t := time.Now()
				h, err := streamLifecycle(ctx, e, mode, cfg.Items, payload)
				if err != nil {
					errs[i] = err
					return
				}
				lat[j], held[j] = time.Since(t), h
			}
		}()
	}
	cpu0, t0 := processCPU(), time.Now()
	close(start)
	wg.Wait()
	wall, cpu := time.Since(t0), processCPU()-cpu0
	if err := errors.Join(errs...); err != nil {
		return err
	}
	if k := e.consumer.ActiveAnchors(); k != 0 {
		return fmt.Errorf("%d anchors left after the run", k)
	}
	k := float64(cfg.Streams)
	r.Add(streamLifecycleHarness, mode, "lifecycles_per_s", "per_s", k/wall.Seconds(), params)
	r.Add(streamLifecycleHarness, mode, "cpu_us_per_lifecycle", "us", float64(cpu.Nanoseconds())/k/1e3, params)
	addPercentiles(r, streamLifecycleHarness, mode, "lifecycle_", lat, params)
	addPercentiles(r, streamLifecycleHarness, mode, "held_after_finalize_", held, params)
	return nil
}

// addPercentiles adds the p50 and p99 of ds, in µs, as prefix+"p50_us" and
// prefix+"p99_us".
func addPercentiles(r *Report, harness, arm, prefix string, ds []time.Duration, params map[string]any) {
	s := slices.Clone(ds)
	slices.Sort(s)
	n := float64(len(s))
	for _, p := range []struct {
		name string
		q    float64
	}{{"p50_us", 0.5}, {"p99_us", 0.99}} {
		r.Add(harness, arm, prefix+p.name, "us", float64(s[int(p.q*(n-1))])/1e3, params)
	}
}
