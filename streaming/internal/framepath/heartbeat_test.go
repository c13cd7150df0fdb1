package framepath

import (
	"testing"

	wire "github.com/velo-go/velo/internal/streamwire"
)

// TestHeartbeatSkipsBusyAndFull: a sender that queued a frame since the
// last beat is not beaten; a full egress drops the beat rather than wait;
// an idle one with room gets one.
func TestHeartbeatSkipsBusyAndFull(t *testing.T) {
	h := newHeartbeater()
	rs := &Stream{pumpWake: make(chan struct{}, 1)}
	rs.active = true
	h.beatOne(rs)
	if len(rs.q) != 0 || rs.active {
		t.Fatalf("busy sender: %d queued, active %v; want none, and active cleared", len(rs.q), rs.active)
	}
	h.beatOne(rs)
	if len(rs.q) != 1 || string(rs.q[0]) != wire.HeartbeatFrame || h.beats.Load() != 1 {
		t.Fatalf("idle sender: queue %q, beats %d", rs.q, h.beats.Load())
	}
	for len(rs.q) < EgressCapacity {
		rs.q = append(rs.q, nil)
	}
	h.beatOne(rs)
	if len(rs.q) != EgressCapacity || h.drops.Load() != 1 {
		t.Fatalf("full egress: %d queued, %d drops", len(rs.q), h.drops.Load())
	}
	rs.q, rs.done = nil, true
	h.beatOne(rs)
	if len(rs.q) != 0 {
		t.Fatal("a finished sender was beaten")
	}
}
