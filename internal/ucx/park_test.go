//go:build ucx

package ucx

import (
	"testing"
	"unsafe"
)

// TestIdleWorkerParks: an idle worker parks, and the backstop timeout
// wakes it into another park, never into a spin: a window of parks with
// no wakeup shows no spin pass. A worker that spun while idle (polling
// instead of parking, or spinning after each timeout) never shows one.
func TestIdleWorkerParks(t *testing.T) {
	p := newPair(t) // endpoints both ways: the worker fds have sockets on them
	for _, w := range []*Worker{p.a, p.b} {
		waitUntil(t, "a park", func() bool { return w.Stats().Parks >= 1 })
		clean := false
		for try := 0; try < 20 && !clean; try++ {
			s0 := w.Stats()
			waitUntil(t, "three more parks", func() bool { return w.Stats().Parks >= s0.Parks+3 })
			s1 := w.Stats()
			// Wire-up or keepalive traffic may wake the worker (and it then
			// spins, as it should): such a window is not idle.
			clean = s1.Wakeups == s0.Wakeups && s1.Spins == s0.Spins
		}
		if !clean {
			t.Fatalf("no idle window without spinning in 20 tries: %+v", w.Stats())
		}
	}
}

// TestDoorbellWakesParkedWorker: a command to a parked worker rings the
// eventfd, and the worker runs it.
func TestDoorbellWakesParkedWorker(t *testing.T) {
	w := newWorker(t)
	waitUntil(t, "a park", func() bool { return w.Stats().Parks >= 1 })
	buf := make([]byte, 4096)
	for range 3 {
		waitUntil(t, "the worker to park", func() bool { return w.ring.isParked() })
		before := w.Stats().Doorbells
		m, err := w.Map(unsafe.Pointer(&buf[0]), len(buf))
		if err != nil {
			t.Fatal(err)
		}
		if err := m.Unmap(); err != nil {
			t.Fatal(err)
		}
		if w.Stats().Doorbells == before {
			t.Fatal("a command to a parked worker did not ring its doorbell")
		}
	}
}
