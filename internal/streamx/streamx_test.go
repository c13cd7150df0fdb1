package streamx_test

import (
	"testing"

	"github.com/velo-go/velo/ext"
	"github.com/velo-go/velo/internal/streamx"
	"github.com/velo-go/velo/streaming"
)

// Every accessor reaches its Manager method: a plain Manager reports one
// anchor once it made one, and the defaults for the rest.
func TestAccessorsReachTheManager(t *testing.T) {
	m := streaming.NewManager(ext.NewInstanceID().WorkerID())
	defer m.Close()
	a, err := streaming.CreateAnchor[[]byte](m)
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	if n := streamx.ActiveAnchors(m); n != 1 {
		t.Fatalf("ActiveAnchors = %d, want 1", n)
	}
	if n := streamx.ActiveSenders(m); n != 0 {
		t.Fatalf("ActiveSenders = %d, want 0", n)
	}
	if got := streamx.ReservationConfig(m); got != streaming.DefaultReservationConfig() {
		t.Fatalf("ReservationConfig = %+v, want the defaults", got)
	}
	if streamx.StreamAddr(m) != nil || streamx.MuxStats(m) != (streamx.MuxCounts{}) {
		t.Fatal("a plain Manager has no listener and no mux")
	}
	if streamx.ConsumerWakes(m) != 0 || streamx.UnattachedExpired(m) != 0 || streamx.WatchdogFirings(m) != 0 {
		t.Fatal("counters of an idle Manager are not zero")
	}
	_ = streamx.HeartbeatInterval(m)
}
