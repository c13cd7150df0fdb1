package hub

import (
	"testing"
)

// TestRegisterTellsProbeInterval: a hub that probes tells each registrant
// its interval, so a registrant can tell a silence from its rhythm (a
// restarted hub that does not know it); a hub without velo, which does
// not probe, says nothing.
func TestRegisterTellsProbeInterval(t *testing.T) {
	cfg := testConfig()
	withVelo := startHub(t, cfg, veloTCP(t))
	if r := register(t, withVelo, fakePeer(), "", nil); r.HeartbeatIntervalMS != cfg.HeartbeatIntervalMS {
		t.Fatalf("with velo: heartbeat_interval_ms %d, want %d", r.HeartbeatIntervalMS, cfg.HeartbeatIntervalMS)
	}
	without := startHub(t, cfg)
	if r := register(t, without, fakePeer(), "", nil); r.HeartbeatIntervalMS != 0 {
		t.Fatalf("without velo: heartbeat_interval_ms %d, want 0", r.HeartbeatIntervalMS)
	}
}
