package messenger_test

import (
	"bytes"
	"sync/atomic"
	"testing"
	"time"

	"github.com/velo-go/velo"
	"github.com/velo-go/velo/ext"
	"github.com/velo-go/velo/messenger"
	"github.com/velo-go/velo/transport/tcp"
)

// countingOwner is an ext.Owner that counts its references.
type countingOwner struct{ refs atomic.Int32 }

func (o *countingOwner) Retain()  { o.refs.Add(1) }
func (o *countingOwner) Release() { o.refs.Add(-1) }

// plainTransport hides the wrapped transport's ext.OwnerRetainer and
// records whether the frames handed to it carried an Owner.
type plainTransport struct {
	ext.Transport
	owned atomic.Int32
}

func (p *plainTransport) Send(target ext.InstanceID, f ext.Frame) (ext.SendOutcome, error) {
	if f.Owner != nil {
		p.owned.Add(1)
	}
	return p.Transport.Send(target, f)
}

func (p *plainTransport) SendOnLane(target ext.InstanceID, lane int, f ext.Frame) (ext.SendOutcome, error) {
	if f.Owner != nil {
		p.owned.Add(1)
	}
	return p.Transport.SendOnLane(target, lane, f)
}

// PostLaneOwned hands a transport that retains owners the caller's buffer
// with its Owner, and any other transport a copy: either way the caller
// may reuse its buffer once its own reference is released, and the peer
// gets the bytes as they were at the call.
func TestPostLaneOwnedCopiesForTransportsThatDoNotRetain(t *testing.T) {
	for _, retains := range []bool{true, false} {
		tr, err := tcp.New()
		must(t, err)
		var send ext.Transport = tr
		plain := &plainTransport{Transport: tr}
		if !retains {
			send = plain
		}
		caller, err := velo.New(testCtx(t), velo.WithTransport(send))
		must(t, err)
		t.Cleanup(func() { shutdownWithin(caller, 5*time.Second) })
		server := newNode(t)
		got := make(chan []byte, 1)
		must(t, server.Messenger().RegisterSystem(messenger.FireHandler("_owned_test", func(c *messenger.Context) {
			got <- bytes.Clone(c.Payload)
		}, messenger.WithInline())))
		must(t, caller.RegisterPeer(server.PeerInfo()))

		buf := []byte("the bytes as they were at the call")
		want := bytes.Clone(buf)
		owner := &countingOwner{}
		owner.refs.Store(1) // the caller's reference
		if _, err := caller.Messenger().PostLaneOwned(server.InstanceID(), 0, "_owned_test", buf, owner); err != nil {
			t.Fatal(err)
		}
		owner.Release()
		deadline := time.Now().Add(failAfter)
		for owner.refs.Load() != 0 {
			if time.Now().After(deadline) {
				t.Fatalf("retains=%v: %d references left on the owner", retains, owner.refs.Load())
			}
			time.Sleep(time.Millisecond)
		}
		copy(buf, "XXXXXXXXXXXXXXXXXXXXXXXXXXXXXXXXXX") // reused once released
		select {
		case b := <-got:
			if !bytes.Equal(b, want) {
				t.Fatalf("retains=%v: the peer got %q, want %q", retains, b, want)
			}
		case <-time.After(failAfter):
			t.Fatalf("retains=%v: nothing arrived", retains)
		}
		if !retains && plain.owned.Load() != 0 {
			t.Fatal("a transport that does not retain owners was handed an Owner")
		}
	}
}
