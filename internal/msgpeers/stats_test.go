package msgpeers

import (
	"errors"
	"runtime"
	"testing"
	"time"

	"github.com/velo-go/velo/ext"
)

// LaneStats counts each lane apart: frames queued behind a write in
// progress, then written on the lane they were sent on, a frame the
// Writer failed left out of the written count, and nothing on the other
// lane.
func TestLaneStatsPerLane(t *testing.T) {
	c := newCore(t, func(err error) {
		if !errors.Is(err, errTestWrite) {
			t.Errorf("send failed: %v", err)
		}
	})
	defer shutdown(c)
	id := ext.NewInstanceID()
	if c.LaneStats(id) != nil {
		t.Fatal("stats for a peer not registered")
	}
	hold, held := make(chan struct{}), make(chan struct{})
	err := c.Register(id, "peer-addr", 2, func(l *Lane) Writer {
		w := &fakeWriter{c: c, l: l}
		if l.Index() == 1 {
			w.hold, w.held = hold, held
		}
		return w
	})
	if err != nil {
		t.Fatal(err)
	}
	send := func(b byte) {
		t.Helper()
		if _, err := c.SendOnLane(id, 1, ext.Frame{Type: ext.Message, Payload: []byte{b, 0, 0}}, 1<<20); err != nil {
			t.Fatal(err)
		}
	}
	send(1)
	<-held // the writer holds frame 1; what follows queues
	send(2)
	send(failMe)
	st := c.LaneStats(id)
	if len(st) != 2 {
		t.Fatalf("%d lanes reported, want 2", len(st))
	}
	if q := st[1]; q.Lane != 1 || !q.Connected || q.Remote != "peer-addr" || q.QueuedFrames != 2 || q.QueuedBytes != 6 || q.FramesWritten != 0 || !q.LastWrite.IsZero() {
		t.Fatalf("lane 1 with a write held: %+v; want 2 frames (6 bytes) queued, none written", q)
	}
	close(hold)
	deadline := time.Now().Add(20 * time.Second)
	for c.LaneStats(id)[1].FramesWritten != 2 || c.LaneStats(id)[1].QueuedFrames != 0 {
		if time.Now().After(deadline) {
			t.Fatalf("lane 1 never showed its 2 frames written: %+v", c.LaneStats(id)[1])
		}
		runtime.Gosched()
	}
	st = c.LaneStats(id)
	if l1 := st[1]; l1.BytesWritten != 6 || l1.LastWrite.IsZero() {
		t.Fatalf("lane 1 after the writes: %+v; want 6 bytes written (the failed frame not)", l1)
	}
	if l0 := st[0]; l0.FramesWritten != 0 || l0.BytesWritten != 0 || !l0.LastWrite.IsZero() || l0.Lane != 0 {
		t.Fatalf("lane 0, never used: %+v", l0)
	}
	c.Unregister(id)
	if c.LaneStats(id) != nil {
		t.Fatal("stats for a peer unregistered")
	}
}
