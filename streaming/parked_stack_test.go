//go:build !race

// The race detector's instrumentation makes every frame larger: the
// count below is for the build that runs in production.

package streaming

import (
	"context"
	"runtime"
	"runtime/metrics"
	"sync"
	"testing"
	"time"
)

// The GC scans at most 500 bytes of stack per consumer parked in
// NextBytes (this test's loop and the runtime's frames included): 440
// with Go 1.26, the consumers sharing one context and so, all but the
// first, waiting on their channels alone in nextBytes's frame; 776 when
// they selected on the context under Await and waitLocked, and 1,152 when
// the wait sat under PopBytes, pop and takeLocked, whose results did not
// fit in registers.
func TestParkedConsumerStack(t *testing.T) {
	const n, limit = 2000, 500
	m := newTestManager(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	anchors := make([]*Anchor[[]byte], n)
	for i := range anchors {
		a, err := CreateAnchor[[]byte](m)
		if err != nil {
			t.Fatal(err)
		}
		defer a.Close()
		anchors[i] = a
	}
	base := stackScanned()
	var wg sync.WaitGroup
	defer wg.Wait()
	defer cancel()
	for _, a := range anchors {
		wg.Go(func() {
			for {
				if _, err := a.NextBytes(ctx); err != nil {
					return
				}
			}
		})
	}
	waitParked(t, anchors)
	if per := (stackScanned() - base) / n; per > limit {
		t.Fatalf("the GC scanned %d bytes of stack per parked consumer, want at most %d", per, limit)
	}
}

// stackScanned runs a GC and returns the stack bytes it scanned.
func stackScanned() int64 {
	runtime.GC()
	s := []metrics.Sample{{Name: "/gc/scan/stack:bytes"}}
	metrics.Read(s)
	return int64(s[0].Value.Uint64())
}

// waitParked waits until a consumer waits on every anchor of as.
func waitParked(t *testing.T, as []*Anchor[[]byte]) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for _, a := range as {
		for !a.st.Snapshot().ConsumerWaiting {
			if time.Now().After(deadline) {
				t.Fatal("the consumers did not all park within 10 s")
			}
			runtime.Gosched()
		}
	}
}
