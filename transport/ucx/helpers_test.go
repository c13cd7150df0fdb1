package ucx

import (
	"context"
	"testing"

	"github.com/velo-go/velo/ext"
)

// runChild is the hook of tagged tests that re-execute the test binary as
// a node process; untagged builds have none.
var runChild = func() bool { return false }

// newFake builds a transport on a fake worker of net.
func newFake(t testing.TB, net *fakeNet, opts ...Option) *Transport {
	t.Helper()
	var o options
	for _, opt := range opts {
		opt(&o)
	}
	if err := o.defaults(); err != nil {
		t.Fatal(err)
	}
	tr, err := newTransport(o, net.newWorker())
	if err != nil {
		t.Fatal(err)
	}
	return tr
}

func (t *Transport) fake() *fakeWorker { return t.w.(*fakeWorker) }

// node is a started transport with its adapter.
type node struct {
	id      ext.InstanceID
	tr      *Transport
	adapter *ext.TransportAdapter
	state   *ext.ShutdownState
	info    ext.PeerInfo
}

func startNode(t testing.TB, tr *Transport) *node {
	t.Helper()
	n := &node{id: ext.NewInstanceID(), tr: tr, state: ext.NewShutdownState()}
	n.adapter = ext.NewTransportAdapter(n.state, ext.AdapterConfig{})
	ep, err := tr.Start(context.Background(), n.adapter)
	if err != nil {
		t.Fatal(err)
	}
	n.info = ext.PeerInfo{InstanceID: n.id, Address: ext.WorkerAddress{Key: ep}}
	t.Cleanup(func() {
		tr.Shutdown()
		n.adapter.Close()
	})
	return n
}

func (n *node) register(t testing.TB, peers ...*node) {
	t.Helper()
	for _, p := range peers {
		if err := n.tr.Register(p.info); err != nil {
			t.Fatal(err)
		}
	}
}
