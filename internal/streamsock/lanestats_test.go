package streamsock

import (
	"runtime"
	"sync/atomic"
	"testing"
	"time"

	"github.com/velo-go/velo/ext"
	"github.com/velo-go/velo/internal/frame"
)

// waitFor polls cond until it holds, failing the test after 20 s.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting until %s", what)
		}
		runtime.Gosched()
	}
}

// LaneStats shows each lane on its own: frames queued behind a dial that
// is held, then written on the lane they were sent on and not on the
// other, the socket's remote address, and a reconnect after the lane's
// connection is cut.
func TestLaneStatsPerLane(t *testing.T) {
	rx := newNode(t, Config{})
	var got atomic.Int64
	stop := make(chan struct{})
	wg := consume(rx, &got, stop)
	defer func() { close(stop); wg.Wait() }()

	nw := &testNet{release: make(chan struct{})}
	tx := newNodeOn(t, nw, Config{Lanes: 2})
	if tx.t.LaneStats(rx.id) != nil {
		t.Fatal("stats for a peer not registered")
	}
	if err := tx.t.Register(rx.info()); err != nil {
		t.Fatal(err)
	}
	f := ext.Frame{Type: ext.Message, Header: make([]byte, 8), Payload: make([]byte, 100)}
	const n = 5
	for range n {
		if _, err := tx.t.SendOnLane(rx.id, 1, f); err != nil {
			t.Fatal(err)
		}
	}
	st := tx.t.LaneStats(rx.id)
	if len(st) != 2 {
		t.Fatalf("%d lanes reported, want 2", len(st))
	}
	wire := uint64(frame.PreambleLen + f.Len())
	if q := st[1]; q.Lane != 1 || q.Connected || q.QueuedFrames != n || q.QueuedBytes != n*int(wire) || q.FramesWritten != 0 {
		t.Fatalf("lane 1 behind a held dial: %+v, want %d frames (%d bytes) queued, none written", q, n, n*wire)
	}
	close(nw.release)
	waitCount(t, &got, n)
	waitFor(t, "lane 1 counts its frames", func() bool { return tx.t.LaneStats(rx.id)[1].FramesWritten == n })
	st = tx.t.LaneStats(rx.id)
	l1 := st[1]
	if !l1.Connected || l1.Remote != rx.t.ln.Addr().String() || l1.BytesWritten != n*wire || l1.QueuedFrames != 0 || l1.LastWrite.IsZero() || l1.Reconnects != 0 {
		t.Fatalf("lane 1 after the writes: %+v; want connected to %s, %d bytes written, nothing queued", l1, rx.t.ln.Addr(), n*wire)
	}
	if l0 := st[0]; l0.Connected || l0.FramesWritten != 0 || l0.BytesWritten != 0 || !l0.LastWrite.IsZero() {
		t.Fatalf("lane 0, never used: %+v", l0)
	}

	// Cut lane 1's connection; the next frame dials again and the slot
	// counts on.
	p := (*tx.t.peers.Load())[rx.id]
	p.lanes[1].Load().abort()
	waitFor(t, "the cut lane leaves its slot", func() bool { return p.lanes[1].Load() == nil })
	if tx.t.LaneStats(rx.id)[1].Connected {
		t.Fatal("a lane with no connection is shown connected")
	}
	if _, err := tx.t.SendOnLane(rx.id, 1, f); err != nil {
		t.Fatal(err)
	}
	waitCount(t, &got, n+1)
	waitFor(t, "lane 1 counts the frame after the reconnect", func() bool { return tx.t.LaneStats(rx.id)[1].FramesWritten == n+1 })
	if l1 := tx.t.LaneStats(rx.id)[1]; l1.Reconnects != 1 || !l1.Connected {
		t.Fatalf("lane 1 after a reconnect: %+v, want 1 reconnect", l1)
	}
}
