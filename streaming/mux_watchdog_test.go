package streaming

import (
	"errors"
	"log/slog"
	"strings"
	"testing"
	"time"
)

// TestMuxWatchdogLogLine: when the mux stream watchdog ends streams whose
// batches were lost, the consumer writes the book's stream_watchdog warn
// line with the stream's depths, and only one for two streams that fire
// together (the line is rate-limited, the count is not).
func TestMuxWatchdogLogLine(t *testing.T) {
	const hb = 20 * time.Millisecond
	var log syncBuffer
	producer, consumer := muxNodes(t, MuxConfig{}, WithHeartbeatInterval(hb),
		WithStreamLogger(slog.New(slog.NewTextHandler(&log, nil))))
	var gate postGate
	gate.install(muxOf(t, producer))
	a1, s1 := muxStream(t, producer, consumer)
	a2, s2 := muxStream(t, producer, consumer)
	fill(t, s1, 0, 1)
	fill(t, s2, 0, 1)
	readTokens(t, a1, 0, 1, 5*time.Second)
	readTokens(t, a2, 0, 1, 5*time.Second)
	gate.lose.Store(1 << 30)
	for _, a := range []*Anchor[[]byte]{a1, a2} {
		if _, err := nextItemWithin(t, a, 5*time.Second); !errors.Is(err, ErrSenderDropped) {
			t.Fatalf("want ErrSenderDropped from the watchdog, got %v", err)
		}
	}
	if n := consumer.sm.watchdogFirings(); n != 2 {
		t.Fatalf("WatchdogFirings = %d, want 2", n)
	}
	// The line is written after the watchdog lets go of its lock, which
	// is after the ends it injected reached the anchors: wait for it.
	deadline := time.Now().Add(5 * time.Second)
	for !strings.Contains(log.String(), "stream_watchdog:") && time.Now().Before(deadline) {
		time.Sleep(time.Millisecond)
	}
	out := log.String()
	if lines := strings.Count(out, "stream_watchdog:"); lines != 1 {
		t.Fatalf("%d stream_watchdog lines for two firings in a row, want 1:\n%s", lines, out)
	}
	for _, want := range []string{"level=WARN", "local_id=", "slot_buffer_len=0", "arrivals=",
		"heartbeat_deadline_ms=20", "detection_multiplier=3"} {
		if !strings.Contains(out, want) {
			t.Fatalf("the warning lacks %q:\n%s", want, out)
		}
	}
}
