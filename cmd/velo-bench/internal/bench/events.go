package bench

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"slices"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"github.com/velo-go/velo"
	"github.com/velo-go/velo/events"
	"github.com/velo-go/velo/internal/msgwire"
	"github.com/velo-go/velo/metrics"
)

// EventsArms are the arms of the events harness, in the order of the first
// rep (each rep rotates the order by one, see rotated).
var EventsArms = []string{"local", "remote", "many-waiters"}

// EventsConfig sets the events harness.
type EventsConfig struct {
	Transport string
	Events    int // local arm: events per rep
	Iters     int // remote arm: timed waits per rep and metric
	Waiters   int // many-waiters arm: waiters on one remote event
	Rounds    int // many-waiters arm: events per rep
	Reps      int
	Arms      []string
}

// Validate reports a config that cannot run.
func (c EventsConfig) Validate() error {
	for _, a := range c.Arms {
		if !slices.Contains(EventsArms, a) {
			return fmt.Errorf("unknown arm %q (want %v)", a, EventsArms)
		}
	}
	if c.Events < 1 || c.Iters < 1 || c.Waiters < 1 || c.Rounds < 1 || c.Reps < 1 {
		return errors.New("events, iters, waiters, rounds and reps must be positive")
	}
	return nil
}

const (
	eventsHarness = "events"
	eventsWarmup  = 200
)

// Events measures the event system:
//
//   - local: one goroutine creates, triggers and waits on events in a loop;
//     events per second and process CPU (user+sys, every goroutine, GC
//     included) per event.
//   - remote: A owns, B waits. trigger_to_wake: B's subscription is
//     settled (A's _event_subscribe handler returned, B has no call waiting),
//     then A triggers and B's waiter wakes; the clock runs from the Trigger
//     call to the wake. trigger_call: how long that Trigger call took; it
//     returns once the notice to B is handed to the transport. wait_rtt: B
//     waits on an event that A completed earlier and B never saw: one
//     subscription round trip. unary_rtt: a velo unary round trip on the
//     same pair, for scale.
//   - many-waiters: Waiters goroutines on B wait on one event of A; time
//     from the Trigger call to the last wake, and the subscriptions B sent
//     for it (one, however many waiters).
func Events(cfg EventsConfig, r *Report) error {
	if err := cfg.Validate(); err != nil {
		return err
	}
	for rep := 0; rep < cfg.Reps; rep++ {
		for _, arm := range rotated(cfg.Arms, rep) {
			var err error
			switch arm {
			case "local":
				err = eventsLocal(cfg, r)
			case "remote":
				err = eventsRemote(cfg, r)
			case "many-waiters":
				err = eventsManyWaiters(cfg, r)
			}
			if err != nil {
				return fmt.Errorf("%s: %w", arm, err)
			}
		}
	}
	return nil
}

// processCPU is the user plus system CPU time of the whole process.
func processCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

func eventsLocal(cfg EventsConfig, r *Report) error {
	ctx := context.Background()
	m := events.NewLocal()
	round := func() error {
		e, err := m.NewEvent()
		if err != nil {
			return err
		}
		if err := e.Trigger(); err != nil {
			return err
		}
		return m.Wait(ctx, e.Handle())
	}
	for i := 0; i < eventsWarmup*10; i++ {
		if err := round(); err != nil {
			return err
		}
	}
	runtime.GC()
	cpu0, t0 := processCPU(), time.Now()
	for i := 0; i < cfg.Events; i++ {
		if err := round(); err != nil {
			return err
		}
	}
	wall, cpu := time.Since(t0), processCPU()-cpu0
	params := map[string]any{"events": cfg.Events}
	r.Add(eventsHarness, "local", "events_per_s", "per_s", float64(cfg.Events)/wall.Seconds(), params)
	r.Add(eventsHarness, "local", "cpu_ns_per_event", "ns", float64(cpu.Nanoseconds())/float64(cfg.Events), params)
	return nil
}

// eventsPair starts two nodes that know each other, both recording
// metrics: the harness watches A's _event_subscribe handler return and B's
// pending calls drain, to start the clock only once a subscription is
// settled.
func eventsPair(ctx context.Context, kind string) (p *eventsNodes, err error) {
	p = &eventsNodes{}
	am, err := metrics.Register(prometheus.NewRegistry())
	if err != nil {
		return nil, err
	}
	bm, err := metrics.Register(prometheus.NewRegistry())
	if err != nil {
		return nil, err
	}
	start := func(vm *metrics.VeloMetrics) (*velo.Node, error) {
		tr, err := NewTransport(kind)
		if err != nil {
			return nil, err
		}
		// Per-handler series for velo's own handlers, for _event_subscribe's.
		return velo.New(ctx, velo.WithTransport(tr), velo.WithMetrics(vm), velo.WithSystemHandlerMetrics())
	}
	if p.a, err = start(am); err != nil {
		return nil, err
	}
	if p.b, err = start(bm); err != nil {
		shutdownWithin(p.a, 5*time.Second)
		return nil, err
	}
	err = p.a.RegisterPeer(p.b.PeerInfo())
	if err == nil {
		err = p.b.RegisterPeer(p.a.PeerInfo())
	}
	if err == nil {
		err = p.a.Register(velo.UnaryHandler("echo", func(c *velo.Context) ([]byte, error) {
			return append([]byte(nil), c.Payload...), nil
		}))
	}
	if err != nil {
		p.stop()
		return nil, err
	}
	// _event_subscribe is a fire-and-forget request, as in the reference.
	p.subscribes = am.HandlerRequests.WithLabelValues("_event_subscribe", msgwire.FireAndForget.String(), "success")
	p.bPending = bm.PendingResponses
	return p, nil
}

type eventsNodes struct {
	a, b       *velo.Node
	subscribes prometheus.Counter // _event_subscribe handled by A
	bPending   prometheus.Gauge   // B's calls waiting for an answer
}

func (p *eventsNodes) stop() {
	shutdownWithin(p.b, 5*time.Second)
	shutdownWithin(p.a, 5*time.Second)
}

// settled waits until A has handled B's subscription (so A has recorded
// B as a subscriber) and B has no call waiting, so
// nothing of the subscription is in flight when the clock starts. subs is
// A's count of handled subscriptions before the wait began. Both signals
// are pre-bound metrics, read without a registry gather: polling them
// allocates little, so it does not bring the collector into the timed part.
func (p *eventsNodes) settled(subs float64) error {
	deadline := time.Now().Add(10 * time.Second)
	for metricValue(p.subscribes) <= subs || metricValue(p.bPending) > 0 {
		if time.Now().After(deadline) {
			return errors.New("the subscription did not settle within 10 s")
		}
		runtime.Gosched()
	}
	return nil
}

func metricValue(c prometheus.Metric) float64 {
	var m dto.Metric
	if c.Write(&m) != nil {
		return 0
	}
	if m.Gauge != nil {
		return m.GetGauge().GetValue()
	}
	return m.GetCounter().GetValue()
}

func percentileUS(xs []time.Duration, q float64) float64 {
	s := slices.Clone(xs)
	slices.Sort(s)
	return float64(s[int(q*float64(len(s)-1))]) / 1e3
}

func eventsRemote(cfg EventsConfig, r *Report) error {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	p, err := eventsPair(ctx, cfg.Transport)
	if err != nil {
		return err
	}
	defer p.stop()
	a, b := p.a, p.b

	// One waiter goroutine on B, fed handles, reports when it woke.
	type woke struct {
		at  time.Time
		err error
	}
	handles := make(chan events.Handle)
	wakes := make(chan woke)
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for h := range handles {
			err := b.Events.Wait(ctx, h)
			select {
			case wakes <- woke{time.Now(), err}:
			case <-ctx.Done():
				return
			}
		}
	}()
	defer wg.Wait()
	defer cancel() // a failed run ends the waiter's Wait instead of waiting out ctx
	defer close(handles)

	params := map[string]any{"transport": cfg.Transport, "iters": cfg.Iters}
	lat := make([]time.Duration, 0, cfg.Iters)
	var trig []time.Duration
	for i := 0; i < eventsWarmup+cfg.Iters; i++ {
		e, err := a.Events.NewEvent()
		if err != nil {
			return err
		}
		subs := metricValue(p.subscribes)
		handles <- e.Handle()
		if err := p.settled(subs); err != nil {
			return err
		}
		t0 := time.Now()
		if err := e.Trigger(); err != nil {
			return err
		}
		trig = append(trig, time.Since(t0))
		w := <-wakes
		if w.err != nil {
			return w.err
		}
		if i >= eventsWarmup {
			lat = append(lat, w.at.Sub(t0))
		}
	}
	r.Add(eventsHarness, "remote", "trigger_call_p50_us", "us", percentileUS(trig[eventsWarmup:], 0.5), params)
	r.Add(eventsHarness, "remote", "trigger_to_wake_p50_us", "us", percentileUS(lat, 0.5), params)
	r.Add(eventsHarness, "remote", "trigger_to_wake_p99_us", "us", percentileUS(lat, 0.99), params)

	lat = lat[:0]
	for i := 0; i < eventsWarmup+cfg.Iters; i++ {
		e, err := a.Events.NewEvent()
		if err != nil {
			return err
		}
		if err := e.Trigger(); err != nil {
			return err
		}
		t0 := time.Now()
		if err := b.Events.Wait(ctx, e.Handle()); err != nil {
			return err
		}
		if i >= eventsWarmup {
			lat = append(lat, time.Since(t0))
		}
	}
	r.Add(eventsHarness, "remote", "wait_rtt_p50_us", "us", percentileUS(lat, 0.5), params)
	r.Add(eventsHarness, "remote", "wait_rtt_p99_us", "us", percentileUS(lat, 0.99), params)

	lat = lat[:0]
	payload := make([]byte, 17) // the size of an _event_trigger payload
	for i := 0; i < eventsWarmup+cfg.Iters; i++ {
		t0 := time.Now()
		if _, err := b.Unary(ctx, a.InstanceID(), "echo", payload); err != nil {
			return err
		}
		if i >= eventsWarmup {
			lat = append(lat, time.Since(t0))
		}
	}
	r.Add(eventsHarness, "remote", "unary_rtt_p50_us", "us", percentileUS(lat, 0.5), params)
	return nil
}

func eventsManyWaiters(cfg EventsConfig, r *Report) error {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	p, err := eventsPair(ctx, cfg.Transport)
	if err != nil {
		return err
	}
	defer p.stop()
	a, b := p.a, p.b

	params := map[string]any{"transport": cfg.Transport, "waiters": cfg.Waiters, "rounds": cfg.Rounds}
	lastWake := make([]time.Duration, 0, cfg.Rounds)
	var maxSubs int64
	wakes := make([]int64, cfg.Waiters) // unix nanos of each waiter's wake
	for round := 0; round < cfg.Rounds+1; round++ {
		e, err := a.Events.NewEvent()
		if err != nil {
			return err
		}
		subs0 := b.Events.Subscriptions()
		subs := metricValue(p.subscribes)
		var calling atomic.Int64
		allCalling := make(chan struct{})
		var wg sync.WaitGroup
		var failed atomic.Pointer[error]
		for i := 0; i < cfg.Waiters; i++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				if calling.Add(1) == int64(cfg.Waiters) {
					close(allCalling)
				}
				if err := b.Events.Wait(ctx, e.Handle()); err != nil {
					failed.Store(&err)
				}
				wakes[i] = time.Now().UnixNano()
			}()
		}
		<-allCalling
		if err := p.settled(subs); err != nil {
			return err
		}
		// Every waiter has called Wait; give the last ones time to park,
		// so the figure is the wake of parked waiters, not of late callers.
		time.Sleep(20 * time.Millisecond)
		t0 := time.Now()
		if err := e.Trigger(); err != nil {
			return err
		}
		wg.Wait()
		if p := failed.Load(); p != nil {
			return *p
		}
		if round == 0 {
			continue // warm-up: goroutine stacks, connections
		}
		lastWake = append(lastWake, time.Duration(slices.Max(wakes)-t0.UnixNano()))
		maxSubs = max(maxSubs, b.Events.Subscriptions()-subs0)
	}
	r.Add(eventsHarness, "many-waiters", "last_wake_p50_us", "us", percentileUS(lastWake, 0.5), params)
	r.Add(eventsHarness, "many-waiters", "subscriptions_count", "count", float64(maxSubs), params)
	if maxSubs != 1 {
		return fmt.Errorf("%d waiters on one remote event made %d subscriptions, want 1", cfg.Waiters, maxSubs)
	}
	return nil
}
