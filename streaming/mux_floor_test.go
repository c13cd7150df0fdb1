package streaming

import (
	"testing"
	"time"
)

// While batches from a peer keep coming more often than DrainVisitFloor,
// the arrival path returns the credit and the doorbell's floor timer
// never wakes the sweeper. Before, each take after a visit armed it for
// the floor after the visit before, and it woke the sweeper once per
// floor only to arm it again (about a wake per two forward passes at a
// pass per millisecond).
func TestMuxFloorTimerIdleWhileBatchesArrive(t *testing.T) {
	const floor = 20 * time.Millisecond
	producer, consumer := muxNodes(t, MuxConfig{DrainVisitFloor: floor}, slowBeats)
	a, s := muxStream(t, producer, consumer)
	cm := muxOf(t, consumer)
	fill(t, s, 0, 1)
	readTokens(t, a, 0, 1, 5*time.Second)
	fires := cm.N.FloorFires.Load()
	start := time.Now()
	i := 1
	for ; time.Since(start) < 15*floor; i++ { // a batch every round trip, far inside the floor
		fill(t, s, i, 1)
		readTokens(t, a, i, 1, 5*time.Second)
	}
	// A round trip that took a whole floor (a loaded machine) may let one
	// fire with cause; fifteen floors went by.
	if n := cm.N.FloorFires.Load() - fires; n > 2 {
		t.Fatalf("the floor timer woke the sweeper %d times in %d batches over %v, want at most 2", n, i, time.Since(start).Round(time.Millisecond))
	}
}
