package events_test

import (
	"context"
	"errors"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/velo-go/velo/events"
)

func slotOf(h events.Handle) uint32 { return uint32(h.Lo >> 32) }

// A handle whose slot was reused is stale: triggering or waiting on it must
// never reach the event that now lives in the slot. While the stale
// handle's outcome is cached it answers with that outcome; once forgotten,
// it is unknown.
func TestStaleHandleNeverCompletesReusedSlot(t *testing.T) {
	ctx := testCtx(t)
	m := events.NewLocal()
	old := newEvent(t, m)
	stale := old.Handle()
	if err := old.Trigger(); err != nil {
		t.Fatalf("Trigger: %v", err)
	}
	// The free list hands the slot out again at once; allow a few in case
	// that ever changes, and keep them pending so they hold their slots.
	var fresh *events.Event
	var held []*events.Event
	for i := 0; i < 8 && fresh == nil; i++ {
		e := newEvent(t, m)
		if slotOf(e.Handle()) == slotOf(stale) {
			fresh = e
		} else {
			held = append(held, e)
		}
	}
	if fresh == nil {
		t.Fatalf("slot %d of %s was not reused by 8 new events", slotOf(stale), stale)
	}
	h := fresh.Handle()
	if h == stale {
		t.Fatalf("reused slot got the same handle %s: no new generation", h)
	}

	// While cached: the stale handle reports the old outcome.
	if err := m.Trigger(ctx, stale); !errors.Is(err, events.ErrAlreadyCompleted) {
		t.Errorf("Manager.Trigger(stale): %v, want ErrAlreadyCompleted", err)
	}
	if err := m.Poison(ctx, stale, "late"); !errors.Is(err, events.ErrAlreadyCompleted) {
		t.Errorf("Manager.Poison(stale): %v, want ErrAlreadyCompleted", err)
	}
	if err := old.Trigger(); !errors.Is(err, events.ErrAlreadyCompleted) {
		t.Errorf("stale Event.Trigger: %v, want ErrAlreadyCompleted", err)
	}
	if err := old.Poison("late"); !errors.Is(err, events.ErrAlreadyCompleted) {
		t.Errorf("stale Event.Poison: %v, want ErrAlreadyCompleted", err)
	}
	if err := m.Wait(ctx, stale); err != nil {
		t.Errorf("Wait(stale) while cached: %v, want the cached nil", err)
	}
	stillPending(t, m, h, "new event after stale trigger, poison and wait")

	// The slot remembers only its last outcome: once the new event in it
	// completes, the stale handle is unknown, and still completes nothing.
	stillPending(t, m, h, "new event after stale calls")

	// The new event is intact: it completes once, by its own hand.
	w := waitAsync(ctx, m, h)
	if err := fresh.Trigger(); err != nil {
		t.Fatalf("fresh Trigger: %v", err)
	}
	if err := recv(t, w, "wait on fresh"); err != nil {
		t.Fatalf("wait on fresh: %v", err)
	}
	for _, e := range held {
		e.Trigger()
	}
}

// An event completes once: a second Trigger, a Poison after a Trigger and
// a Trigger after a Poison are refused, and the first outcome stands.
func TestCompleteOnce(t *testing.T) {
	ctx := testCtx(t)
	m := events.NewLocal()

	e := newEvent(t, m)
	if err := e.Trigger(); err != nil {
		t.Fatalf("first Trigger: %v", err)
	}
	if err := e.Trigger(); !errors.Is(err, events.ErrAlreadyCompleted) {
		t.Errorf("second Trigger: %v, want ErrAlreadyCompleted", err)
	}
	if err := e.Poison("x"); !errors.Is(err, events.ErrAlreadyCompleted) {
		t.Errorf("Poison after Trigger: %v, want ErrAlreadyCompleted", err)
	}
	if err := m.Trigger(ctx, e.Handle()); !errors.Is(err, events.ErrAlreadyCompleted) {
		t.Errorf("Manager.Trigger after Trigger: %v, want ErrAlreadyCompleted", err)
	}
	if err := m.Wait(ctx, e.Handle()); err != nil {
		t.Errorf("Wait after Trigger: %v", err)
	}

	p := newEvent(t, m)
	if err := p.Poison("broken"); err != nil {
		t.Fatalf("Poison: %v", err)
	}
	if err := p.Trigger(); !errors.Is(err, events.ErrAlreadyCompleted) {
		t.Errorf("Trigger after Poison: %v, want ErrAlreadyCompleted", err)
	}
	if err := m.Trigger(ctx, p.Handle()); !errors.Is(err, events.ErrAlreadyCompleted) {
		t.Errorf("Manager.Trigger after Poison: %v, want ErrAlreadyCompleted", err)
	}
	wantPoisoned(t, m.Wait(ctx, p.Handle()), p.Handle(), "broken", "Wait after Poison then Trigger")

	// Completing through the manager first: the Event's own call is refused.
	q := newEvent(t, m)
	if err := m.Poison(ctx, q.Handle(), "by handle"); err != nil {
		t.Fatalf("Manager.Poison: %v", err)
	}
	if err := q.Trigger(); !errors.Is(err, events.ErrAlreadyCompleted) {
		t.Errorf("Event.Trigger after Manager.Poison: %v, want ErrAlreadyCompleted", err)
	}
	wantPoisoned(t, m.Wait(ctx, q.Handle()), q.Handle(), "by handle", "Wait after Manager.Poison")
}

// Poison reaches every waiter with its reason.
func TestPoisonReachesEveryLocalWaiter(t *testing.T) {
	ctx := testCtx(t)
	m := events.NewLocal()
	e := newEvent(t, m)
	const waiters = 50
	var started sync.WaitGroup
	results := make(chan error, waiters)
	for i := 0; i < waiters; i++ {
		started.Add(1)
		go func() {
			started.Done()
			results <- m.Wait(ctx, e.Handle())
		}()
	}
	started.Wait()
	if err := e.Poison("weights missing"); err != nil {
		t.Fatalf("Poison: %v", err)
	}
	for i := 0; i < waiters; i++ {
		wantPoisoned(t, recv(t, results, "waiter"), e.Handle(), "weights missing", "waiter")
	}
	// A wait that comes after the poison gets it too.
	wantPoisoned(t, m.Wait(ctx, e.Handle()), e.Handle(), "weights missing", "late waiter")
}

func TestMergeLocal(t *testing.T) {
	ctx := testCtx(t)
	m := events.NewLocal()

	t.Run("zero inputs completes at once", func(t *testing.T) {
		h, err := m.Merge(context.Background())
		if err != nil {
			t.Fatalf("Merge: %v", err)
		}
		if err := m.Wait(ctx, h); err != nil {
			t.Fatalf("Wait: %v", err)
		}
	})

	t.Run("inputs already triggered", func(t *testing.T) {
		a, b := newEvent(t, m), newEvent(t, m)
		a.Trigger()
		b.Trigger()
		h, err := m.Merge(ctx, a.Handle(), b.Handle())
		if err != nil {
			t.Fatalf("Merge: %v", err)
		}
		if err := m.Wait(ctx, h); err != nil {
			t.Fatalf("Wait: %v", err)
		}
	})

	t.Run("completes after the last input", func(t *testing.T) {
		a, b := newEvent(t, m), newEvent(t, m)
		h, err := m.Merge(ctx, a.Handle(), b.Handle())
		if err != nil {
			t.Fatalf("Merge: %v", err)
		}
		a.Trigger()
		stillPending(t, m, h, "merge with one input left")
		b.Trigger()
		if err := m.Wait(ctx, h); err != nil {
			t.Fatalf("Wait: %v", err)
		}
	})

	t.Run("poisoned input poisons with its reason", func(t *testing.T) {
		a, b := newEvent(t, m), newEvent(t, m)
		h, err := m.Merge(ctx, a.Handle(), b.Handle())
		if err != nil {
			t.Fatalf("Merge: %v", err)
		}
		w := waitAsync(ctx, m, h)
		b.Poison("tokenizer failed")
		wantPoisoned(t, recv(t, w, "merged wait"), h, "tokenizer failed", "merged wait")
		a.Trigger() // after the poison: changes nothing
		wantPoisoned(t, m.Wait(ctx, h), h, "tokenizer failed", "merged wait after the other input")
	})

	t.Run("unknown input poisons", func(t *testing.T) {
		e := newEvent(t, m)
		bogus := events.Handle{Hi: e.Handle().Hi, Lo: 1<<32 | 0xfffffff}
		h, err := m.Merge(ctx, e.Handle(), bogus)
		if err != nil {
			t.Fatalf("Merge: %v", err)
		}
		err = m.Wait(ctx, h)
		if !errors.Is(err, events.ErrPoisoned) {
			t.Fatalf("Wait: %v, want poisoned", err)
		}
		e.Trigger()
	})
}

// droppedEvent makes an event and lets go of it: only the handle leaves.
//
//go:noinline
func droppedEvent(t testing.TB, m *events.Manager) events.Handle {
	return newEvent(t, m).Handle()
}

// waitForDropPoison runs the collector until the wait on a dropped event
// returns, and checks that it says the event was dropped.
func waitForDropPoison(t *testing.T, w <-chan error, h events.Handle, what string) {
	t.Helper()
	deadline := time.Now().Add(testTimeout)
	for {
		runtime.GC()
		select {
		case err := <-w:
			var pe *events.PoisonedError
			if !errors.As(err, &pe) {
				t.Fatalf("%s: got %v, want *PoisonedError", what, err)
			}
			if pe.Handle != h || !strings.Contains(pe.Reason, "dropped") {
				t.Fatalf("%s: poisoned %s with %q, want %s dropped", what, pe.Handle, pe.Reason, h)
			}
			return
		case <-time.After(5 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: wait did not end %v after the event became unreachable", what, testTimeout)
		}
	}
}

// An event that nobody can complete is poisoned once it is collected, so
// its waiter does not wait for ever.
func TestDroppedEventPoisonsWaiter(t *testing.T) {
	ctx := testCtx(t)
	m := events.NewLocal()
	h := droppedEvent(t, m)
	waitForDropPoison(t, waitAsync(ctx, m, h), h, "local waiter")
}

// Creating, triggering and waiting on a local event costs a fixed number of
// allocations; this fails when one more creeps in. Measured at 5 (176 B):
// the completion, the Event, and three in runtime.AddCleanup (the cleanup
// closure and the runtime's own two). The completion's channel is made only
// when someone waits before the event completes.
func TestLocalEventAllocs(t *testing.T) {
	if raceEnabled {
		t.Skip("the race detector changes allocation counts")
	}
	ctx := context.Background()
	m := events.NewLocal()
	// Warm up: the slot table and free list reach their size.
	for i := 0; i < 2*events.CacheSize; i++ {
		localRound(ctx, m)
	}
	const maxAllocs = 5
	got := testing.AllocsPerRun(10000, func() { localRound(ctx, m) })
	t.Logf("allocations per NewEvent+Trigger+Wait: %v", got)
	if got > maxAllocs {
		t.Fatalf("NewEvent+Trigger+Wait allocates %v times, want at most %d", got, maxAllocs)
	}
}

func localRound(ctx context.Context, m *events.Manager) {
	e, err := m.NewEvent()
	if err != nil {
		panic(err)
	}
	if err := e.Trigger(); err != nil {
		panic(err)
	}
	if err := m.Wait(ctx, e.Handle()); err != nil {
		panic(err)
	}
}

func BenchmarkLocalEvent(b *testing.B) {
	ctx := context.Background()
	m := events.NewLocal()
	b.ReportAllocs()
	for b.Loop() {
		localRound(ctx, m)
	}
}
