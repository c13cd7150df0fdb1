package messenger_test

import (
	"runtime"
	"runtime/debug"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/velo-go/velo"
)

// Ordered lane with Block overflow, bounded shutdown while the lane is held:
// once teardown stops the lane, messages still pushed to it are refused.
// Before the fix, stop left the dead lane in the map and the next push
// recursed until the stack overflowed, killing the process.
func TestReviewBlockLaneShutdownCrash(t *testing.T) {
	debug.SetMaxStack(16 << 20)
	bm := newMetrics(t)
	a, b := pair(t, nil, []velo.Option{velo.WithMetrics(bm)})
	ctx := testCtx(t)
	hold, in := newGate(t), make(chan struct{}, 1)
	must(t, b.Register(velo.FireHandler("o", func(c *velo.Context) {
		if unseq(c.Payload) == 0 {
			in <- struct{}{}
			hold.wait()
		}
	}, velo.WithOrderedConfig(velo.OrderedConfig{MaxQueueDepth: 1, Overflow: velo.Block}))))
	must(t, a.Send(ctx, b.InstanceID(), "o", seq(0)))
	recv(t, in, "first")
	for i := 1; i <= 20; i++ {
		must(t, a.Send(ctx, b.InstanceID(), "o", seq(i)))
	}
	// Wait until the reader holds message 2, blocked for room: message 0
	// is in the held handler and message 1 fills the lane.
	deadline := time.Now().Add(10 * time.Second)
	for testutil.ToFloat64(bm.InboundDequeued) < 3 {
		if time.Now().After(deadline) {
			t.Fatal("the messages never reached the server")
		}
		runtime.Gosched()
	}
	done := make(chan error, 1)
	go func() { done <- b.Shutdown(velo.Timeout(50 * time.Millisecond)) }()
	<-b.Stopped() // teardown began: the lane will stop once the handler returns
	hold.open()
	err := <-done
	t.Logf("shutdown: %v", err)
}
