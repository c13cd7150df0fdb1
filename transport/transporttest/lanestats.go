package transporttest

import (
	"runtime"
	"testing"
	"time"

	"github.com/velo-go/velo/ext"
)

// testLaneStats: a transport that reports its lanes (ext.LaneStatser)
// counts each on its own: frames sent on lane 1 show as written on lane 1,
// with their bytes and a last write, and lane 0 shows none; a peer not
// registered has no lanes. Transports without the interface skip it.
func testLaneStats(t *testing.T, f Factory) {
	rx := start(t, f, Options{}, 0)
	tx := start(t, f, Options{Lanes: 2}, 0)
	ls, ok := ext.LaneStatserOf(tx.tr)
	if !ok {
		t.Skip("the transport does not report its lanes (ext.LaneStatser)")
	}
	if got := ls.LaneStats(rx.id); got != nil {
		t.Fatalf("lanes of a peer not registered: %+v", got)
	}
	tx.register(t, rx)
	const n = 3
	payload := []byte("lane one")
	for i := range n {
		if err := mustSend(t, tx.tr, rx.id, 1, seqFrame(1, i, payload)).Wait(ctxT(t)); err != nil {
			t.Fatalf("admission: %v", err)
		}
	}
	collect(t, rx, n)
	// The receiver has the frames; the writer counts a batch just after
	// handing it over, so wait for the count rather than race it.
	var st []ext.LaneStats
	deadline := time.Now().Add(20 * time.Second)
	for {
		st = ls.LaneStats(rx.id)
		if len(st) == 2 && st[1].FramesWritten == n {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("lane 1 never showed its %d frames written: %+v", n, st)
		}
		runtime.Gosched()
	}
	one := seqFrame(1, 0, payload)
	if l1 := st[1]; l1.Lane != 1 || !l1.Connected || l1.BytesWritten < uint64(n*one.Len()) || l1.LastWrite.IsZero() || l1.QueuedFrames != 0 {
		t.Fatalf("lane 1 after %d frames: %+v", n, l1)
	}
	if l0 := st[0]; l0.Lane != 0 || l0.FramesWritten != 0 || l0.BytesWritten != 0 || !l0.LastWrite.IsZero() {
		t.Fatalf("lane 0, never used: %+v", l0)
	}
}
