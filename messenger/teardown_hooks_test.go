package messenger

import (
	"context"
	"sync/atomic"
	"testing"
	"time"
)

// TestTeardownHooks: Shutdown runs its teardown hooks after the drain and
// while the transports still run; a hook that waits for the teardown
// itself does not hold it up past TeardownHookGrace, and Shutdown returns
// only after it returned.
func TestTeardownHooks(t *testing.T) {
	m, _ := internalPair(t)
	var before, stalledDone atomic.Bool
	m.OnTeardown(func() {
		select {
		case <-m.Stopped():
		default:
			before.Store(!m.stopped.Load())
		}
	})
	m.OnTeardown(func() {
		<-m.Stopped() // closed only at teardown, after the grace
		stalledDone.Store(true)
	})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	start := time.Now()
	if err := m.Shutdown(ctx); err != nil {
		t.Fatal(err)
	}
	if !before.Load() {
		t.Fatal("a teardown hook ran after the transports stopped")
	}
	if !stalledDone.Load() {
		t.Fatal("Shutdown returned before a stalled teardown hook did")
	}
	if took := time.Since(start); took < TeardownHookGrace {
		t.Fatalf("Shutdown took %v with a stalled hook, want at least the grace %v", took, TeardownHookGrace)
	}
}
