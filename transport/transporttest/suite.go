// Package transporttest is the conformance suite for messenger
// transports: the rules of ext.Transport that a node relies on, checked
// against real instances of the transport.
//
// Every transport of this module runs it, and a transport written outside
// the module should too. Give Run a Factory that builds the transport with
// the options the suite asks for, from a test of your own:
//
//	func TestConformance(t *testing.T) {
//		transporttest.Run(t, transporttest.Factory{
//			New: func(t testing.TB, o transporttest.Options) ext.Transport {
//				tr, err := mytransport.New(mytransport.WithLanes(o.Lanes))
//				if err != nil {
//					t.Fatal(err)
//				}
//				return tr
//			},
//		})
//	}
//
// The suite checks per-lane order, large frames, many peers, admission
// (pending sends resolve in order), the drain echo, frames written across
// teardown, unregister failing queued frames, oversized frames, unknown
// peers, that our own shutdown reports no peer lost, and, for a transport
// that reports its lanes (ext.LaneStatser), that each lane counts its own
// frames. With the optional
// hooks it also checks that a malformed frame closes only its connection
// (DialRaw) and that a peer that dies is reported lost, once, within
// 100 ms (Kill). A transport that goes through a broker sets Brokered to
// skip the tests that need a stalled receiver to push back on its sender. Each test starts its own transports, and the whole suite
// takes a few seconds.
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
	// New builds an unstarted transport. Options left at zero mean the
	// transport's defaults.
	New func(t testing.TB, o Options) ext.Transport
	// DialRaw opens a plain socket to a started transport's endpoint, for
	// feeding it bad bytes. Nil skips the malformed-input test. A transport
	// that is not a byte stream returns a net.Conn over its own unit (for
	// gRPC, one raw stream on its method, each Write one message): the test
	// writes one bad chunk and expects Read to end with io.EOF or a reset,
	// not time out.
	DialRaw func(endpoint []byte) (net.Conn, error)
	// Kill stops a started transport as a crash of its process would: its
	// listener and every connection close at once, with none of what an
	// orderly shutdown says to peers. Nil skips the peer-loss test.
	Kill func(tr ext.Transport)
	// Brokered says frames pass through a broker (a NATS server) that
	// buffers for a stalled receiver instead of pushing back on its
	// sender: a stalled receiver never fills the sender's channel. The
	// tests that need it to (pending admissions, unregister failing queued
	// frames) are skipped; such a transport fills its channel another way
	// (a broker that is unreachable) in tests of its own.
	Brokered bool
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
	ext.BindInstance(n.tr, n.id) // as the node does before Start
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
	t.Run("APeerThatDiesIsReportedLostOnce", func(t *testing.T) { testPeerLost(t, f) })
	t.Run("OurOwnShutdownReportsNoPeerLost", func(t *testing.T) { testOwnShutdownNoLoss(t, f) })
	t.Run("OwnersRetainedWhileTheirBytesAreUsed", func(t *testing.T) { testOwnersRetained(t, f) })
	t.Run("LaneStatsCountEachLane", func(t *testing.T) { testLaneStats(t, f) })
}
