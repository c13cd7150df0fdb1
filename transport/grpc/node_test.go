package grpc_test

import (
	"context"
	"errors"
	"log/slog"
	"sync/atomic"
	"testing"
	"time"

	"github.com/velo-go/velo"
	"github.com/velo-go/velo/ext"
	"github.com/velo-go/velo/streaming"
	vgrpc "github.com/velo-go/velo/transport/grpc"
	"github.com/velo-go/velo/transport/tcp"
)

type grpcNode struct {
	*velo.Node
	tr *vgrpc.Transport
}

// startNode runs a node whose only transport is gRPC, with an "echo"
// handler that answers its payload with the node's name in front.
func startNode(t testing.TB, name string) *grpcNode {
	t.Helper()
	tr, err := vgrpc.New()
	if err != nil {
		t.Fatal(err)
	}
	n, err := velo.New(context.Background(), velo.WithTransport(tr), velo.WithLogger(slog.New(slog.DiscardHandler)))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		n.Shutdown(ctx)
	})
	if err := n.Register(velo.UnaryHandler("echo", func(c *velo.Context) ([]byte, error) {
		return append([]byte(name+":"), c.Payload...), nil
	})); err != nil {
		t.Fatal(err)
	}
	return &grpcNode{Node: n, tr: tr}
}

func call(t *testing.T, from, to *grpcNode, payload string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	out, err := from.Unary(ctx, to.InstanceID(), "echo", []byte(payload))
	if err != nil {
		t.Fatalf("call: %v", err)
	}
	return string(out)
}

// TestTwoNodesCallEachOther: two nodes with only the gRPC transport call
// each other both ways, many times, with every answer right.
func TestTwoNodesCallEachOther(t *testing.T) {
	a, b := startNode(t, "a"), startNode(t, "b")
	if err := a.RegisterPeer(b.PeerInfo()); err != nil {
		t.Fatal(err)
	}
	if err := b.RegisterPeer(a.PeerInfo()); err != nil {
		t.Fatal(err)
	}
	for i := range 50 {
		p := string(rune('A' + i%26))
		if got := call(t, a, b, p); got != "b:"+p {
			t.Fatalf("a→b answered %q", got)
		}
		if got := call(t, b, a, p); got != "a:"+p {
			t.Fatalf("b→a answered %q", got)
		}
	}
}

// TestKilledPeerFailsCallsInFlight: calls waiting on a peer whose process
// dies fail within 100 ms with ErrPeerUnreachable.
func TestKilledPeerFailsCallsInFlight(t *testing.T) {
	srv, cli := startNode(t, "srv"), startNode(t, "cli")
	block := make(chan struct{})
	defer close(block)
	var started atomic.Int64
	if err := srv.Register(velo.UnaryHandler("block", func(*velo.Context) ([]byte, error) {
		started.Add(1)
		<-block
		return nil, nil
	})); err != nil {
		t.Fatal(err)
	}
	if err := cli.RegisterPeer(srv.PeerInfo()); err != nil {
		t.Fatal(err)
	}
	call(t, cli, srv, "up")
	const inFlight = 16
	type result struct {
		err error
		at  time.Time
	}
	results := make(chan result, inFlight)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for range inFlight {
		go func() {
			_, err := cli.Unary(ctx, srv.InstanceID(), "block", nil)
			results <- result{err, time.Now()}
		}()
	}
	for deadline := time.Now().Add(5 * time.Second); started.Load() < inFlight; {
		if time.Now().After(deadline) {
			t.Fatalf("only %d of %d calls reached the handler", started.Load(), inFlight)
		}
		time.Sleep(time.Millisecond)
	}
	killed := time.Now()
	vgrpc.Kill(srv.tr)
	for i := range inFlight {
		r := <-results
		if !errors.Is(r.err, velo.ErrPeerUnreachable) {
			t.Errorf("call %d: %v, want ErrPeerUnreachable", i, r.err)
		}
		if d := r.at.Sub(killed); d > 100*time.Millisecond {
			t.Errorf("call %d failed %v after the kill, want within 100 ms", i, d)
		}
	}
}

// TestGoodbyeIsAShutdown: a listener that shuts down in order says goodbye
// on its streams, so the dialer reports the peer's shutdown, not a crash.
func TestGoodbyeIsAShutdown(t *testing.T) {
	srv := startTransport(t)
	cli := startTransport(t)
	lost := make(chan error, 4)
	cli.a.SetPeerLostHandler(func(_ ext.InstanceID, err error) { lost <- err })
	cli.register(t, srv)
	if _, err := cli.tr.Send(srv.id, ext.Frame{Type: ext.Message, Header: []byte("h"), Payload: []byte("x")}); err != nil {
		t.Fatal(err)
	}
	srv.pop(t)
	srv.tr.Shutdown()
	select {
	case err := <-lost:
		if !errors.Is(err, ext.ErrPeerShutdown) || !errors.Is(err, ext.ErrPeerUnreachable) {
			t.Fatalf("loss after the goodbye: %v, want ErrPeerShutdown", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("no loss reported after the peer shut down")
	}
}

// TestLostStreamFailsQueuedFrames: frames queued behind a stream that the
// peer's death ends are reported failed, each with the loss as its cause,
// and the next send opens a new stream once the peer is back.
func TestLostStreamFailsQueuedFrames(t *testing.T) {
	srv := startTransportWith(t, 1)
	cli := startTransportWith(t, 0, vgrpc.WithChannelBytes(64<<20))
	var failed atomic.Int64
	cli.a.SetSendErrorHandler(func(_ ext.InstanceID, _ ext.Frame, err error) {
		if !errors.Is(err, ext.ErrPeerUnreachable) {
			t.Errorf("queued frame failed with %v, want the loss (ErrPeerUnreachable)", err)
		}
		failed.Add(1)
	})
	cli.register(t, srv)
	// The server takes one request and stalls: the rest pile up behind
	// HTTP/2 flow control and in the lane's queue.
	payload := make([]byte, 64<<10)
	const n = 400
	for range n {
		if _, err := cli.tr.Send(srv.id, ext.Frame{Type: ext.Message, Header: []byte("h"), Payload: payload}); err != nil {
			t.Fatal(err)
		}
	}
	vgrpc.Kill(srv.tr)
	deadline := time.Now().Add(5 * time.Second)
	for failed.Load() == 0 {
		if time.Now().After(deadline) {
			t.Fatal("no queued frame was reported failed after the peer died")
		}
		time.Sleep(time.Millisecond)
	}
}

// transportNode is a started transport with its adapter, below a node.
type transportNode struct {
	id ext.InstanceID
	tr *vgrpc.Transport
	a  *ext.TransportAdapter
	ep []byte
}

func startTransport(t testing.TB) *transportNode { return startTransportWith(t, 0) }

func startTransportWith(t testing.TB, queue int, opts ...vgrpc.Option) *transportNode {
	t.Helper()
	tr, err := vgrpc.New(opts...)
	if err != nil {
		t.Fatal(err)
	}
	a := ext.NewTransportAdapter(ext.NewShutdownState(), ext.AdapterConfig{MessageQueue: queue})
	ep, err := tr.Start(context.Background(), a)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		tr.Shutdown()
		<-tr.Closed()
		a.Close()
	})
	return &transportNode{id: ext.NewInstanceID(), tr: tr, a: a, ep: ep}
}

func (n *transportNode) register(t testing.TB, p *transportNode) {
	t.Helper()
	if err := n.tr.Register(ext.PeerInfo{InstanceID: p.id, Address: ext.WorkerAddress{vgrpc.Key: p.ep}}); err != nil {
		t.Fatal(err)
	}
}

func (n *transportNode) pop(t testing.TB) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	m, err := n.a.Messages().Pop(ctx)
	if err != nil {
		t.Fatal(err)
	}
	m.Done()
}

// TestReconnectAfterThePeerRestarts: once a peer that died listens again
// at its address, the next sends open a new stream on the same client
// connection (grpc-go redials it) and arrive.
func TestReconnectAfterThePeerRestarts(t *testing.T) {
	srv := startTransport(t)
	cli := startTransport(t)
	lost := make(chan error, 16)
	cli.a.SetPeerLostHandler(func(_ ext.InstanceID, err error) { lost <- err })
	cli.register(t, srv)
	if _, err := cli.tr.Send(srv.id, ext.Frame{Type: ext.Message, Header: []byte("1")}); err != nil {
		t.Fatal(err)
	}
	srv.pop(t)
	addr, err := tcp.DialAddr(srv.ep)
	if err != nil {
		t.Fatal(err)
	}
	vgrpc.Kill(srv.tr)
	select {
	case <-lost:
	case <-time.After(5 * time.Second):
		t.Fatal("the dead peer was never reported lost")
	}
	// The killed transport closes its listener on its way out: wait for
	// that before listening on the same address again.
	select {
	case <-srv.tr.Closed():
	case <-time.After(5 * time.Second):
		t.Fatal("the killed transport never closed")
	}
	again := startTransportWith(t, 0, vgrpc.WithListenAddr(addr))
	// Sends until one arrives: one made while the client connection still
	// backs off from a failed attempt fails (and is reported), as it should.
	deadline := time.Now().Add(5 * time.Second)
	for {
		if _, err := cli.tr.Send(srv.id, ext.Frame{Type: ext.Message, Header: []byte("2")}); err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
		m, err := again.a.Messages().Pop(ctx)
		cancel()
		if err == nil {
			m.Done()
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("no frame reached the restarted peer")
		}
	}
	if err := cli.tr.CheckHealth(context.Background(), srv.id); err != nil {
		t.Fatalf("health after the reconnect: %v", err)
	}
}

// TestCheckHealth: a live peer is healthy before any send; a dead one is
// unreachable within the caller's context.
func TestCheckHealth(t *testing.T) {
	srv := startTransport(t)
	cli := startTransport(t)
	cli.register(t, srv)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := cli.tr.CheckHealth(ctx, srv.id); err != nil {
		t.Fatalf("health of a live peer: %v", err)
	}
	vgrpc.Kill(srv.tr)
	<-srv.tr.Closed()
	if err := cli.tr.CheckHealth(ctx, srv.id); !errors.Is(err, ext.ErrPeerUnreachable) {
		t.Fatalf("health of a dead peer: %v, want ErrPeerUnreachable", err)
	}
}

// TestStreamOverTheMux: a response stream between two nodes whose only
// transport is gRPC runs over the messenger mux, so over gRPC, in order.
func TestStreamOverTheMux(t *testing.T) {
	engine, frontend := startNode(t, "engine"), startNode(t, "frontend")
	if err := frontend.RegisterPeer(engine.PeerInfo()); err != nil {
		t.Fatal(err)
	}
	const n = 200
	if err := engine.Register(velo.TypedUnaryHandler("generate", func(c *velo.Context, h streaming.AnchorHandle) (int, error) {
		s, err := streaming.AttachAnchor[int](c.Context(), engine.Streams, h)
		if err != nil {
			return 0, err
		}
		for i := range n {
			if err := s.Send(c.Context(), i); err != nil {
				return 0, err
			}
		}
		return n, s.Finalize()
	})); err != nil {
		t.Fatal(err)
	}
	anchor, err := streaming.CreateAnchor[int](frontend.Streams)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	sent := make(chan error, 1)
	go func() {
		_, err := velo.TypedUnary[int](ctx, frontend.Node, engine.InstanceID(), "generate", anchor.Handle())
		sent <- err
	}()
	next := 0
	for v, err := range anchor.All(ctx) {
		if err != nil {
			t.Fatalf("after %d items: %v", next, err)
		}
		if v != next {
			t.Fatalf("item %d is %d", next, v)
		}
		next++
	}
	if next != n {
		t.Fatalf("%d items, want %d", next, n)
	}
	if err := <-sent; err != nil {
		t.Fatal(err)
	}
}
