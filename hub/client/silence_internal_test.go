package client

import (
	"testing"
	"time"
)

// TestSilenceDue: the check is due silenceFactor intervals after the last
// probe, each probe pushes it back, a check that found the hub down waits
// one interval before the next, and a hub that does not probe (interval
// 0) or no registration means no check at all.
func TestSilenceDue(t *testing.T) {
	t0 := time.Unix(1000, 0)
	every := 100 * time.Millisecond
	var w silence
	if _, ok := w.dueAt(true); ok {
		t.Fatal("due without an interval")
	}
	w.registered(every, t0)
	if _, ok := w.dueAt(false); ok {
		t.Fatal("due without a registration")
	}
	if at, _ := w.dueAt(true); !at.Equal(t0.Add(3 * every)) {
		t.Fatalf("first check at %v, want 3 intervals after the registration", at.Sub(t0))
	}
	w.heard(t0.Add(2 * every))
	if at, _ := w.dueAt(true); !at.Equal(t0.Add(5 * every)) {
		t.Fatalf("after a probe: %v", at.Sub(t0))
	}
	w.lastCheck = t0.Add(5 * every)
	if at, _ := w.dueAt(true); !at.Equal(t0.Add(6 * every)) {
		t.Fatalf("after a check: %v, want one interval later", at.Sub(t0))
	}
	w.registered(0, t0)
	if _, ok := w.dueAt(true); ok {
		t.Fatal("due for a hub that does not probe")
	}
}
