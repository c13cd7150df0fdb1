package streaming

import (
	"context"
	"errors"
	"io"
	"testing"
	"time"

	"github.com/velo-go/velo/streaming/internal/mux"
)

// The heartbeat clauses of the path suite. They wait on heartbeat windows
// of the default interval (5 s): in the bubble that costs no real time.

// clauseHeartbeatKeepsIdle: an idle producer (heartbeating when remote)
// is not dropped over ten heartbeat windows, Next never returns a
// heartbeat, and the next thing it returns is the next item.
func clauseHeartbeatKeepsIdle(t *testing.T, p suitePath) {
	env := buildPath(t, p)
	a, s := suiteStream(t, env)
	ctx := context.Background()
	if err := s.Send(ctx, []byte("first")); err != nil {
		t.Fatal(err)
	}
	if v, err := suiteNext(a); err != nil || string(v) != "first" {
		t.Fatalf("Next = %q, %v", v, err)
	}
	if v, err := suiteNextWithin(a, 10*defaultHeartbeatInterval); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("idle stream over 10 windows: Next = %q, %v; want nothing", v, err)
	}
	if n := env.cons.watchdogFirings(); n != 0 {
		t.Fatalf("WatchdogFirings = %d on a live stream", n)
	}
	if !notYet(s.Done()) {
		t.Fatal("the idle producer was told to end")
	}
	if err := s.Send(ctx, []byte("second")); err != nil {
		t.Fatal(err)
	}
	if v, err := a.NextBytes(ctx); err != nil || string(v) != "second" {
		t.Fatalf("NextBytes after the idle windows = %q, %v", v, err)
	}
	if err := s.Finalize(); err != nil {
		t.Fatal(err)
	}
	if _, err := suiteNext(a); err != io.EOF {
		t.Fatalf("after Finalize: %v, want io.EOF", err)
	}
}

// clauseSilentProducerLost: a producer from which nothing more arrives
// (its node's writes to the consumer held, the connections open, so no
// heartbeat either) is ended on the consumer with ErrSenderDropped after
// detectionMultiplier windows, not before two (the mux's watchdog sweeps,
// so it may take up to one window more); the consumer counts one firing,
// the producer none. The producer hears of it as a cancel: over the mux
// the consumer closes its slot (CloseSlot), on the per-stream path the
// stream's connection.
func clauseSilentProducerLost(t *testing.T, p suitePath) {
	env := buildPath(t, p)
	a, s := suiteStream(t, env)
	// More items than a window of credit, each read: credit has come back
	// to the producer, on the connection that also carries the watchdog's
	// close over the mux (a connection that never carried anything from
	// the consumer could not prove itself while the producer's writes are
	// held, so nothing could reach the producer on it).
	for i := range 3 * mux.DefaultInitialCredit {
		if err := s.Send(context.Background(), []byte("item")); err != nil {
			t.Fatalf("Send %d: %v", i, err)
		}
		if _, err := suiteNext(a); err != nil {
			t.Fatalf("Next %d: %v", i, err)
		}
	}
	if err := s.Send(context.Background(), []byte("last")); err != nil {
		t.Fatal(err)
	}
	if v, err := suiteNext(a); err != nil || string(v) != "last" {
		t.Fatalf("Next = %q, %v", v, err)
	}
	env.holdProducer(t)
	last := time.Now()
	_, err := suiteNextWithin(a, 10*defaultHeartbeatInterval)
	took := time.Since(last)
	if !errors.Is(err, ErrSenderDropped) {
		t.Fatalf("Next after %v of silence = %v, want ErrSenderDropped", took, err)
	}
	w := defaultHeartbeatInterval
	if lo, hi := 2*w, (detectionMultiplier+1)*w; took < lo || took > hi {
		t.Fatalf("dropped %v after the last frame, want within [%v, %v]", took, lo, hi)
	}
	t.Logf("dropped %v after the last frame (window %v)", took, w)
	if n := env.cons.watchdogFirings(); n != 1 {
		t.Fatalf("WatchdogFirings = %d, want 1", n)
	}
	if n := env.prod.watchdogFirings(); n != 0 {
		t.Fatalf("producer's WatchdogFirings = %d, want 0", n)
	}
	heard(t, s.Cancelled(), "the watchdog's end, at the producer")
	if err := s.Send(context.Background(), []byte("after")); !errors.Is(err, ErrCancelled) {
		t.Fatalf("a Send after the watchdog's end = %v, want ErrCancelled", err)
	}
}
