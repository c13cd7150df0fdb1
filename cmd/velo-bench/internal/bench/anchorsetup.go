package bench

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"runtime"
	"runtime/debug"
	"runtime/metrics"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/velo-go/velo/ext"
	"github.com/velo-go/velo/internal/streamx"
	"github.com/velo-go/velo/streaming"
)

// AnchorSetupArms are the arms of the anchor-setup harness, in the order of
// the first rep (each rep rotates the order by one, see rotated).
var AnchorSetupArms = []string{"unattached", "lifecycle"}

// AnchorSetupConfig sets the anchor-setup harness: unattached anchors
// held, and concurrent create-attach-finalize lifecycles.
type AnchorSetupConfig struct {
	Held    int // unattached arm: anchors created and held
	Tasks   int // lifecycle arm: concurrent goroutines
	Streams int // lifecycle arm: lifecycles per goroutine
	Reps    int
	Arms    []string
}

// Validate reports a config that cannot run.
func (c AnchorSetupConfig) Validate() error {
	for _, a := range c.Arms {
		if !slices.Contains(AnchorSetupArms, a) {
			return fmt.Errorf("unknown arm %q (want %v)", a, AnchorSetupArms)
		}
	}
	if c.Held < 1 || c.Tasks < 1 || c.Streams < 1 || c.Reps < 1 {
		return errors.New("held, tasks, streams and reps must be positive")
	}
	return nil
}

const anchorSetupHarness = "anchor-setup"

// AnchorSetup measures the anchor path alone, with no network: each arm
// runs on its own streaming.Manager, made and closed inside the arm.
//
//   - unattached: create Held anchors and hold them unattached, each with
//     the default 120 s unattached deadline in the Manager's queue. Create
//     time per anchor; goroutines added (the Manager's sweeper included);
//     RSS added per anchor (/proc/self/statm after GC and
//     debug.FreeOSMemory, so freed pages are not counted) and live heap
//     added per anchor.
//   - lifecycle: Tasks goroutines each run Streams same-worker lifecycles:
//     create, attach, send one 40-byte item, finalize, read the item and
//     the terminal, close. Lifecycles per second, latency percentiles of
//     one lifecycle, and process CPU (user+sys, GC included) per lifecycle.
func AnchorSetup(cfg AnchorSetupConfig, r *Report) error {
	if err := cfg.Validate(); err != nil {
		return err
	}
	for rep := 0; rep < cfg.Reps; rep++ {
		for _, arm := range rotated(cfg.Arms, rep) {
			var err error
			switch arm {
			case "unattached":
				err = anchorUnattached(cfg, r)
			case "lifecycle":
				err = anchorLifecycle(cfg, r)
			}
			if err != nil {
				return fmt.Errorf("%s: %w", arm, err)
			}
		}
	}
	return nil
}

// settledMemory returns RSS and live heap bytes after the heap has been
// collected and its free pages given back to the OS.
func settledMemory() (rss, heap uint64) {
	runtime.GC()
	debug.FreeOSMemory()
	s := []metrics.Sample{{Name: "/memory/classes/heap/objects:bytes"}}
	metrics.Read(s)
	return residentBytes(), s[0].Value.Uint64()
}

// residentBytes reads the resident set from /proc/self/statm (Linux); 0
// elsewhere.
func residentBytes() uint64 {
	b, err := os.ReadFile("/proc/self/statm")
	if err != nil {
		return 0
	}
	f := strings.Fields(string(b))
	if len(f) < 2 {
		return 0
	}
	pages, _ := strconv.ParseUint(f[1], 10, 64)
	return pages * uint64(os.Getpagesize())
}

func anchorUnattached(cfg AnchorSetupConfig, r *Report) error {
	held := make([]*streaming.Anchor[[]byte], 0, cfg.Held)
	g0 := runtime.NumGoroutine()
	rss0, heap0 := settledMemory()
	m := streaming.NewManager(ext.NewInstanceID().WorkerID())
	defer m.Close()
	t0 := time.Now()
	for range cfg.Held {
		a, err := streaming.CreateAnchor[[]byte](m)
		if err != nil {
			return err
		}
		held = append(held, a)
	}
	create := time.Since(t0)
	rss1, heap1 := settledMemory()
	g1 := runtime.NumGoroutine()
	n := float64(cfg.Held)
	params := map[string]any{"held": cfg.Held}
	r.Add(anchorSetupHarness, "unattached", "create_ns", "ns", float64(create.Nanoseconds())/n, params)
	r.Add(anchorSetupHarness, "unattached", "goroutines_added_count", "count", float64(g1-g0), params)
	r.Add(anchorSetupHarness, "unattached", "rss_per_anchor_bytes", "bytes", (float64(rss1)-float64(rss0))/n, params)
	r.Add(anchorSetupHarness, "unattached", "heap_per_anchor_bytes", "bytes", (float64(heap1)-float64(heap0))/n, params)
	for _, a := range held {
		a.Close()
	}
	if k := streamx.ActiveAnchors(m); k != 0 {
		return fmt.Errorf("%d anchors left after Close", k)
	}
	return nil
}

var anchorPayload = []byte("a forty-byte token of a response stream.")

// oneLifecycle is one same-worker stream, end to end.
func oneLifecycle(ctx context.Context, m *streaming.Manager) error {
	a, err := streaming.CreateAnchor[[]byte](m)
	if err != nil {
		return err
	}
	defer a.Close()
	s, err := streaming.AttachAnchor[[]byte](ctx, m, a.Handle())
	if err != nil {
		return err
	}
	if err := s.SendBytes(ctx, anchorPayload); err != nil {
		return err
	}
	if err := s.Finalize(); err != nil {
		return err
	}
	if _, err := a.NextBytes(ctx); err != nil {
		return err
	}
	if _, err := a.NextBytes(ctx); !errors.Is(err, io.EOF) {
		return fmt.Errorf("terminal: %v, want EOF", err)
	}
	return nil
}

func anchorLifecycle(cfg AnchorSetupConfig, r *Report) error {
	ctx := context.Background()
	m := streaming.NewManager(ext.NewInstanceID().WorkerID())
	defer m.Close()
	for range 1000 { // warm up the registry and the queue
		if err := oneLifecycle(ctx, m); err != nil {
			return err
		}
	}
	lat := make([][]time.Duration, cfg.Tasks)
	for i := range lat {
		lat[i] = make([]time.Duration, cfg.Streams)
	}
	errs := make([]error, cfg.Tasks)
	runtime.GC()
	var wg sync.WaitGroup
	start := make(chan struct{})
	for i := range cfg.Tasks {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			ls := lat[i]
			for j := range ls {
				t := time.Now()
				if err := oneLifecycle(ctx, m); err != nil {
					errs[i] = err
					return
				}
				ls[j] = time.Since(t)
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
	if k := streamx.ActiveAnchors(m); k != 0 {
		return fmt.Errorf("%d anchors left after the run", k)
	}
	all := slices.Concat(lat...)
	n := float64(len(all))
	params := map[string]any{"tasks": cfg.Tasks, "streams": cfg.Streams, "procs": runtime.GOMAXPROCS(0)}
	r.Add(anchorSetupHarness, "lifecycle", "lifecycles_per_s", "per_s", n/wall.Seconds(), params)
	r.Add(anchorSetupHarness, "lifecycle", "cpu_us_per_lifecycle", "us", float64(cpu.Nanoseconds())/n/1e3, params)
	slices.Sort(all)
	for _, p := range []struct {
		name string
		q    float64
	}{{"p50_us", 0.5}, {"p99_us", 0.99}, {"p999_us", 0.999}} {
		r.Add(anchorSetupHarness, "lifecycle", "lifecycle_"+p.name, "us", float64(all[int(p.q*(n-1))])/1e3, params)
	}
	return nil
}
