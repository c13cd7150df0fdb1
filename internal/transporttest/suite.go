// Package transporttest is the conformance suite that every messenger
// transport runs: per-lane order, large frames, many peers, admission,
// the drain echo, teardown, unregister and malformed input.
package transporttest

import (
	"context"
	"net"
	"testing"
	"time"

	"github.com/velo-go/velo/ext"
)

// Options are the settings a test needs a transport built with. Zero means
// the transport's default.
type Options struct {
	Lanes         int
	ChannelBytes  int
	TeardownGrace time.Duration
	MaxFrameSize  int
}

// Factory builds transports for the suite.
type Factory struct {
	// New builds an unstarted transport.
	New func(t testing.TB, o Options) ext.Transport
	// DialRaw opens a plain socket to a started transport's endpoint, for
	// feeding it bad bytes. Nil skips the malformed-input test.
	DialRaw func(endpoint []byte) (net.Conn, error)
}

// node is one started transport with its adapter.
type node struct {
	id      ext.InstanceID
	tr      ext.Transport
	adapter *ext.TransportAdapter
	state   *ext.ShutdownState
	info    ext.PeerInfo
}

func start(t testing.TB, f Factory, o Options, queue int) *node {
	t.Helper()
	n := &node{id: ext.NewInstanceID(), tr: f.New(t, o), state: ext.NewShutdownState()}
	n.adapter = ext.NewTransportAdapter(n.state, ext.AdapterConfig{MessageQueue: queue, OtherQueue: queue})
	ep, err := n.tr.Start(context.Background(), n.adapter)
	if err != nil {
		t.Fatalf("start: %v", err)
	}
	n.info = ext.PeerInfo{InstanceID: n.id, Address: ext.WorkerAddress{n.tr.Key(): ep}}
	t.Cleanup(func() {
		n.tr.Shutdown()
		<-n.tr.Closed()
		n.adapter.Close()
	})
	return n
}

func (n *node) register(t testing.TB, peers ...*node) {
	t.Helper()
	for _, p := range peers {
		if err := n.tr.Register(p.info); err != nil {
			t.Fatalf("register: %v", err)
		}
	}
}

// Run runs every conformance test against the factory.
func Run(t *testing.T, f Factory) {
	t.Run("OrderPerLane", func(t *testing.T) { testOrderPerLane(t, f) })
	t.Run("LargeFrames", func(t *testing.T) { testLargeFrames(t, f) })
	t.Run("ManyPeers", func(t *testing.T) { testManyPeers(t, f) })
	t.Run("AdmissionPendingResolvesInOrder", func(t *testing.T) { testAdmission(t, f) })
	t.Run("DrainEchoReachesSender", func(t *testing.T) { testDrainEcho(t, f) })
	t.Run("AdmittedFramesWrittenAcrossTeardown", func(t *testing.T) { testTeardownWrites(t, f) })
	t.Run("UnregisterFailsQueuedFrames", func(t *testing.T) { testUnregister(t, f) })
	t.Run("MalformedFrameClosesOnlyItsConnection", func(t *testing.T) { testMalformed(t, f) })
	t.Run("FrameTooLargeIsRefused", func(t *testing.T) { testTooLarge(t, f) })
	t.Run("SendToUnknownPeer", func(t *testing.T) { testUnknownPeer(t, f) })
}
