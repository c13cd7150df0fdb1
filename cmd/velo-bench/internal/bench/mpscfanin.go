package bench

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"strconv"
	"sync"
	"time"

	"github.com/velo-go/velo/ext"
	"github.com/velo-go/velo/streaming"
)

// MPSCFaninConfig sets the mpsc-fanin harness: P producers on the same
// worker send into one MPSC anchor, read by one consumer goroutine.
type MPSCFaninConfig struct {
	Producers []int // one arm per entry, named "p<N>"
	Items     int   // items per arm and rep, split evenly over the producers
	Payload   int   // bytes in each item
	Capacity  int   // the anchor's inlet capacity
	Reps      int
}

// Validate reports a config that cannot run.
func (c MPSCFaninConfig) Validate() error {
	if len(c.Producers) == 0 {
		return errors.New("no producer count to run")
	}
	for _, p := range c.Producers {
		if p < 1 || p > c.Items {
			return fmt.Errorf("producers %d: want 1..items (%d)", p, c.Items)
		}
	}
	if c.Payload < 0 || c.Capacity < 1 || c.Reps < 1 {
		return errors.New("capacity and reps must be positive, payload not negative")
	}
	return nil
}

const mpscFaninHarness = "mpsc-fanin"

// MPSCFanin measures fan-in on one MPSC anchor. Each arm makes a fresh
// Manager and anchor; its producers attach with AttachMPSCAnchor, send
// their share of Items with SendBytes and detach; the consumer reads every
// item and every producer's Detached. It reports items per second and
// process CPU (getrusage user+sys, GC included) per item.
func MPSCFanin(cfg MPSCFaninConfig, r *Report) error {
	if err := cfg.Validate(); err != nil {
		return err
	}
	for rep := 0; rep < cfg.Reps; rep++ {
		for _, p := range rotated(cfg.Producers, rep) {
			if err := mpscFaninArm(cfg, p, r); err != nil {
				return fmt.Errorf("p%d: %w", p, err)
			}
		}
	}
	return nil
}

func mpscFaninArm(cfg MPSCFaninConfig, producers int, r *Report) error {
	ctx := context.Background()
	m := streaming.NewManager(ext.NewInstanceID().WorkerID())
	defer m.Close()
	a, err := streaming.CreateMPSCAnchor[[]byte](m, streaming.WithCapacity(cfg.Capacity))
	if err != nil {
		return err
	}
	defer a.Close()
	senders := make([]*streaming.MPSCSender[[]byte], producers)
	for i := range senders {
		if senders[i], err = streaming.AttachMPSCAnchor[[]byte](ctx, m, a.Handle()); err != nil {
			return err
		}
		defer senders[i].Close()
	}
	payload := make([]byte, cfg.Payload)
	per := cfg.Items / producers
	total := per * producers
	errs := make([]error, producers+1)
	runtime.GC()
	var wg sync.WaitGroup
	start := make(chan struct{})
	for i, s := range senders {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			for range per {
				if err := s.SendBytes(ctx, payload); err != nil {
					errs[i] = err
					return
				}
			}
			errs[i] = s.Detach()
		}()
	}
	wg.Add(1)
	go func() {
		defer wg.Done()
		<-start
		items, detached := 0, 0
		for detached < producers {
			f, err := a.Next(ctx)
			if err != nil {
				errs[producers] = err
				return
			}
			switch f.Kind {
			case streaming.MPSCItem:
				items++
			case streaming.MPSCDetached:
				detached++
			default:
				errs[producers] = fmt.Errorf("unexpected frame %v", f.Kind)
				return
			}
		}
		if items != total {
			errs[producers] = fmt.Errorf("read %d items, want %d", items, total)
		}
	}()
	cpu0, t0 := processCPU(), time.Now()
	close(start)
	wg.Wait()
	wall, cpu := time.Since(t0), processCPU()-cpu0
	if err := errors.Join(errs...); err != nil {
		return err
	}
	n := float64(total)
	arm := "p" + strconv.Itoa(producers)
	params := map[string]any{"items": cfg.Items, "payload": cfg.Payload, "capacity": cfg.Capacity, "procs": runtime.GOMAXPROCS(0)}
	r.Add(mpscFaninHarness, arm, "items_per_s", "per_s", n/wall.Seconds(), params)
	r.Add(mpscFaninHarness, arm, "cpu_ns_per_item", "ns", float64(cpu.Nanoseconds())/n, params)
	return nil
}
