package queuetest

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/velo-go/velo/queue"
)

// CrashConfig shapes a crash run.
type CrashConfig struct {
	Items     int // items sent, numbered 0..Items-1
	Receivers int // competing receivers, one of which is killed
	KillAfter int // the victim acknowledges this many items first
	Hold      int // then receives this many more, never settles them, and stops
}

// CrashReport counts what happened to the items.
type CrashReport struct {
	Items       int
	Deliveries  int64 // items handed to a receiver, redeliveries included
	Acked       int64 // acknowledgements that succeeded
	Held        int   // items the victim held unsettled when it stopped (its last pull may have taken more)
	ProcessedLT int   // items never delivered
	AckedNot1   int   // items acknowledged zero times or more than once
	Took        time.Duration
}

func (r CrashReport) String() string {
	return fmt.Sprintf("items=%d deliveries=%d redelivered=%d acked=%d held_by_victim=%d never_processed=%d acked_not_once=%d took=%s",
		r.Items, r.Deliveries, r.Deliveries-int64(r.Items), r.Acked, r.Held, r.ProcessedLT, r.AckedNot1, r.Took.Round(time.Millisecond))
}

// crashRun is the shared state of one crash run.
type crashRun struct {
	cfg       CrashConfig
	processed []atomic.Int32
	acked     []atomic.Int32
	deliv     atomic.Int64
	ackTotal  atomic.Int64
	allAcked  chan struct{}
	once      sync.Once
	killed    chan struct{} // closed when the victim has stopped
	crashed   atomic.Bool   // the victim reached its kill point
}

// Crash sends cfg.Items items through the named queue of b to
// cfg.Receivers competing receivers and kills one of them mid-run: it stops
// receiving and closes its handle without settling what it holds. It fails
// t unless every item was delivered at least once and acknowledged exactly
// once, and returns the counts.
func Crash(t testing.TB, b queue.Backend, name string, cfg CrashConfig) CrashReport {
	t.Helper()
	run := &crashRun{
		cfg:       cfg,
		processed: make([]atomic.Int32, cfg.Items),
		acked:     make([]atomic.Int32, cfg.Items),
		allAcked:  make(chan struct{}),
		killed:    make(chan struct{}),
	}
	if 2*(cfg.KillAfter+cfg.Hold) > cfg.Items {
		t.Fatal("KillAfter+Hold must be at most half of Items")
	}
	ctx, cancel := context.WithTimeout(context.Background(), FailAfter)
	defer cancel()
	start := time.Now()
	var wg sync.WaitGroup
	for i := range cfg.Receivers {
		rx, err := queue.NewReceiver[Job](ctx, b, name)
		must(t, err)
		defer rx.Close()
		if i == 0 {
			wg.Go(func() { run.victim(ctx, rx) })
		} else {
			wg.Go(func() { run.worker(ctx, rx) })
		}
	}
	go run.send(ctx, t, b, name)
	run.wait(ctx, t)
	took := time.Since(start)
	cancel()
	wg.Wait()
	return run.report(t, cfg.Hold, took)
}

func (c *crashRun) send(ctx context.Context, t testing.TB, b queue.Backend, name string) {
	tx, err := queue.NewSender[Job](ctx, b, name)
	if err != nil {
		t.Error(err)
		return
	}
	defer tx.Close()
	for i := range c.cfg.Items {
		if err := tx.Send(ctx, Job{0, i}); err != nil {
			t.Errorf("send %d: %v", i, err)
			return
		}
	}
}

func (c *crashRun) wait(ctx context.Context, t testing.TB) {
	t.Helper()
	select {
	case <-c.allAcked:
	case <-ctx.Done():
		t.Fatalf("only %d of %d items acknowledged", c.ackTotal.Load(), c.cfg.Items)
	}
}

// handle counts one delivery, and acknowledges it when ack is true.
func (c *crashRun) handle(ctx context.Context, it *queue.Item[Job], ack bool) {
	c.deliv.Add(1)
	c.processed[it.Value.Seq].Add(1)
	if !ack || it.Ack(ctx) != nil {
		return
	}
	c.acked[it.Value.Seq].Add(1)
	if c.ackTotal.Add(1) == int64(c.cfg.Items) {
		c.once.Do(func() { close(c.allAcked) })
	}
}

// worker acknowledges every item it gets. Once half the items are
// acknowledged it waits for the victim to stop, so the crash always happens
// mid-run however the receivers are scheduled.
func (c *crashRun) worker(ctx context.Context, rx *queue.Receiver[Job]) {
	for {
		if c.ackTotal.Load() >= int64(c.cfg.Items/2) {
			select {
			case <-c.killed:
			case <-ctx.Done():
				return
			}
		}
		it, err := rx.Receive(ctx)
		if err != nil {
			return
		}
		c.handle(ctx, it, true)
	}
}

// victim acknowledges KillAfter items, receives Hold more without settling
// them, and stops: its handle closes with those items still unsettled.
func (c *crashRun) victim(ctx context.Context, rx *queue.Receiver[Job]) {
	defer close(c.killed) // also on an early exit, so workers never wait forever
	for n := 0; n < c.cfg.KillAfter+c.cfg.Hold; n++ {
		it, err := rx.Receive(ctx)
		if err != nil {
			return
		}
		c.handle(ctx, it, n < c.cfg.KillAfter)
	}
	_ = rx.Close()
	c.crashed.Store(true)
}

func (c *crashRun) report(t testing.TB, held int, took time.Duration) CrashReport {
	t.Helper()
	r := CrashReport{Items: c.cfg.Items, Deliveries: c.deliv.Load(), Acked: c.ackTotal.Load(), Held: held, Took: took}
	for i := range c.cfg.Items {
		if c.processed[i].Load() == 0 {
			r.ProcessedLT++
		}
		if c.acked[i].Load() != 1 {
			r.AckedNot1++
		}
	}
	if !c.crashed.Load() {
		t.Error("the victim stopped before its kill point")
	}
	if r.ProcessedLT != 0 || r.AckedNot1 != 0 || r.Acked != int64(r.Items) {
		t.Errorf("crash run: %s", r)
	}
	return r
}
