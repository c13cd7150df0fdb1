package messenger

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/velo-go/velo/ext"
	"github.com/velo-go/velo/transport/tcp"
)

// internalPair starts two messengers in this package (the velo facade would
// be an import cycle here) and returns the caller and the server.
func internalPair(t *testing.T) (caller, server *Messenger) {
	t.Helper()
	caller, server = internalMessenger(t), internalMessenger(t)
	if err := caller.RegisterPeer(server.PeerInfo()); err != nil {
		t.Fatal(err)
	}
	return caller, server
}

// internalMessenger starts one messenger over TCP, shut down when t ends.
func internalMessenger(t *testing.T) *Messenger {
	t.Helper()
	tr, err := tcp.New()
	if err != nil {
		t.Fatal(err)
	}
	m, err := New(context.Background(), Config{Transports: []ext.Transport{tr}, ResponseSlots: 64})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { shutdownWithin(m, 5*time.Second) })
	return m
}

// TestLaneIdleTimerIsNotPerMessage: an ordered lane keeps one idle timer
// for its life and moves it only when it fires early, so 1000 messages arm
// it a handful of times, not 1000 (design: no timer per record).
//
// laneTimerArms is package-wide, so this test must not run in parallel
// with other ordered-dispatch tests of this package.
func TestLaneIdleTimerIsNotPerMessage(t *testing.T) {
	const n = 1000
	for _, tc := range []struct {
		name string
		ttl  time.Duration
	}{
		{"default TTL", 0},
		{"50ms TTL", 50 * time.Millisecond},
	} {
		t.Run(tc.name, func(t *testing.T) {
			a, b := internalPair(t)
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			var ran atomic.Int64
			h := SyncHandler("lane", func(c *Context) error { ran.Add(1); return nil }, WithOrderedConfig(OrderedConfig{IdleLaneTTL: tc.ttl}))
			if err := b.Register(h); err != nil {
				t.Fatal(err)
			}
			if err := a.WaitForHandler(ctx, b.InstanceID(), "lane"); err != nil {
				t.Fatal(err)
			}
			before := laneTimerArms.Load()
			start := time.Now()
			for i := range n {
				if err := a.Sync(ctx, b.InstanceID(), "lane", nil); err != nil {
					t.Fatalf("message %d: %v", i, err)
				}
			}
			elapsed := time.Since(start)
			arms := laneTimerArms.Load() - before
			t.Logf("%d messages in %v armed the idle timer %d times", n, elapsed, arms)
			if ran.Load() != n {
				t.Fatalf("handler ran %d times", ran.Load())
			}
			if tc.ttl == 0 {
				// One lane, one timer, never fired: armed once.
				if arms != 1 {
					t.Fatalf("armed %d times, want 1", arms)
				}
				return
			}
			// The timer fires about once per TTL of traffic and is moved on; a
			// lane that retired in a gap comes back with a new one. Either way
			// the count follows the clock, not the messages.
			if limit := int64(2*elapsed/tc.ttl) + 3; arms > limit || arms >= n/10 {
				t.Fatalf("armed %d times for %d messages in %v (limit %d)", arms, n, elapsed, limit)
			}
		})
	}
}

// TestParseRequestHeaderDoesNotAllocate: the request decoder runs once per
// inbound message on the reader goroutine.
func TestParseRequestHeaderDoesNotAllocate(t *testing.T) {
	hb, err := EncodeHeaders(map[string]string{"trace-id": "abc"})
	if err != nil {
		t.Fatal(err)
	}
	b := appendRequestHeader(nil, UnaryResponse, ResponseID{Hi: 1, Lo: 2}, "ping", hb)
	if n := testing.AllocsPerRun(1000, func() {
		if _, err := parseRequestHeader(b); err != nil {
			t.Fatal(err)
		}
	}); n != 0 {
		t.Fatalf("parseRequestHeader allocated %v times", n)
	}
}

// shutdownWithin shuts n down, draining for at most d.
func shutdownWithin(n interface{ Shutdown(context.Context) error }, d time.Duration) error {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	return n.Shutdown(ctx)
}
