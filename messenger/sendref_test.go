package messenger_test

import (
	"bytes"
	"sync/atomic"
	"testing"

	"github.com/velo-go/velo"
	"github.com/velo-go/velo/ext"
	"github.com/velo-go/velo/transport/tcp"
)

// A small request to a transport that takes frames by pointer
// (ext.FrameRefSender, as TCP does) goes down as a pointer to the frame in
// its pooled buffer, not as a frame copied at every call on the way (a
// tenth of a fire-and-forget message's cost to send); a large one, and
// every request to a transport without SendRef, still goes by Send. The
// bytes arrive either way.
func TestSmallRequestsGoByReference(t *testing.T) {
	tr, err := tcp.New()
	must(t, err)
	spy := &refSpy{Transport: tr}
	caller := newNodeOn(t, spy)
	server := newNode(t)
	var got atomic.Int64
	must(t, server.Register(velo.FireHandler("sink", func(c *velo.Context) { got.Add(int64(len(c.Payload))) })))
	must(t, server.Register(velo.UnaryHandler("echo", func(c *velo.Context) ([]byte, error) {
		return bytes.Clone(c.Payload), nil
	})))
	must(t, caller.RegisterPeer(server.PeerInfo()))
	ctx := testCtx(t)
	must(t, caller.WaitForHandler(ctx, server.InstanceID(), "sink"))
	refs, sends := spy.refs.Load(), spy.sends.Load()
	const n = 100
	payload := bytes.Repeat([]byte("x"), 64)
	for range n {
		must(t, caller.Send(ctx, server.InstanceID(), "sink", payload))
	}
	resp, err := caller.Unary(ctx, server.InstanceID(), "echo", payload)
	must(t, err)
	if !bytes.Equal(resp, payload) {
		t.Fatalf("echo answered %q", resp)
	}
	if r, s := spy.refs.Load()-refs, spy.sends.Load()-sends; r != n+1 || s != 0 {
		t.Fatalf("%d requests by SendRef and %d by Send, want %d and 0", r, s, n+1)
	}
	large := bytes.Repeat([]byte("y"), 8<<10) // past a pooled buffer
	must(t, caller.Send(ctx, server.InstanceID(), "sink", large))
	if s := spy.sends.Load() - sends; s != 1 {
		t.Fatalf("a large request went by Send %d times, want 1", s)
	}
	want := int64(n*len(payload) + len(large))
	waitFor(t, "the handler to see every byte", func() bool { return got.Load() == want })
}

// refSpy is a transport that counts the frames handed to it by Send and
// by SendRef.
type refSpy struct {
	ext.Transport
	refs, sends atomic.Int64
}

func (s *refSpy) Unwrap() ext.Transport { return s.Transport }
func (s *refSpy) RetainsOwners() bool   { return true }

func (s *refSpy) Send(target ext.InstanceID, f ext.Frame) (ext.SendOutcome, error) {
	if f.Type == ext.Message {
		s.sends.Add(1)
	}
	return s.Transport.Send(target, f)
}

func (s *refSpy) SendRef(target ext.InstanceID, f *ext.Frame) (ext.SendOutcome, error) {
	s.refs.Add(1)
	return s.Transport.(ext.FrameRefSender).SendRef(target, f)
}
