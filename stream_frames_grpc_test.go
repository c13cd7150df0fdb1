package velo_test

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"runtime"
	"sync"
	"testing"
	"time"

	"github.com/velo-go/velo"
	"github.com/velo-go/velo/ext"
	"github.com/velo-go/velo/internal/testwait"
	"github.com/velo-go/velo/streaming"
	grpctr "github.com/velo-go/velo/transport/grpc"
	"github.com/velo-go/velo/transport/tcp"
)

// killable wraps a frame transport and can cut every stream it opened or
// took at once, with nothing said: its node's process dying.
type killable struct {
	ext.FrameTransport
	mu      sync.Mutex
	senders []ext.FrameSender
	lns     []ext.FrameListener
}

func (k *killable) Listen(addr string) (ext.FrameListener, error) {
	ln, err := k.FrameTransport.Listen(addr)
	if err == nil {
		k.mu.Lock()
		k.lns = append(k.lns, ln)
		k.mu.Unlock()
	}
	return ln, err
}

func (k *killable) Dial(ctx context.Context, entry []byte, r ext.StreamRoute) (ext.FrameSender, error) {
	s, err := k.FrameTransport.Dial(ctx, entry, r)
	if err == nil {
		k.mu.Lock()
		k.senders = append(k.senders, s)
		k.mu.Unlock()
	}
	return s, err
}

func (k *killable) kill() {
	k.mu.Lock()
	defer k.mu.Unlock()
	for _, s := range k.senders {
		s.Close()
	}
	for _, ln := range k.lns {
		ln.Close()
	}
}

// grpcFrameNode is a node with the mux off whose per-stream path runs over
// the gRPC frame transport.
func grpcFrameNode(t *testing.T) (*velo.Node, *killable) {
	t.Helper()
	tr, err := tcp.New()
	if err != nil {
		t.Fatal(err)
	}
	ft := &killable{FrameTransport: grpctr.NewFrameTransport()}
	n, err := velo.New(context.Background(), velo.WithTransport(tr), velo.WithFrameTransport(ft),
		velo.WithMux(streaming.MuxConfig{Disabled: true}), velo.WithLogger(slog.New(slog.DiscardHandler)))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		n.Shutdown(ctx)
	})
	return n, ft
}

func grpcFramePair(t *testing.T) (consumer, producer *velo.Node, prodFT *killable) {
	consumer, _ = grpcFrameNode(t)
	producer, prodFT = grpcFrameNode(t)
	if err := producer.RegisterPeer(consumer.PeerInfo()); err != nil {
		t.Fatal(err)
	}
	if _, err := consumer.PeerInfo().Address.Lookup(grpctr.FrameKey); err != nil {
		t.Fatalf("the node does not advertise grpc-stream: %v", err)
	}
	return consumer, producer, prodFT
}

// 200 items go in order over the gRPC frame transport, and the producer
// retires Sent once the consumer's server confirmed the stream's end.
func TestGRPCFrameTransportStreams200InOrder(t *testing.T) {
	consumer, producer, _ := grpcFramePair(t)
	a, err := streaming.CreateAnchor[int](consumer.Streams)
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	s, err := streaming.AttachAnchor[int](ctx, producer.Streams, a.Handle())
	if err != nil {
		t.Fatal(err)
	}
	if got := s.NegotiatedTransport(); got != "grpc-stream" {
		t.Fatalf("negotiated %q, want grpc-stream", got)
	}
	go func() {
		for i := range 200 {
			if s.Send(ctx, i) != nil {
				return
			}
		}
		s.Finalize()
	}()
	for i := range 200 {
		v, err := a.Next(ctx)
		if err != nil || v != i {
			t.Fatalf("item %d = %d, %v", i, v, err)
		}
	}
	if _, err := a.Next(ctx); !errors.Is(err, io.EOF) {
		t.Fatalf("after the last item: %v, want io.EOF", err)
	}
	select {
	case <-s.Retired():
	case <-ctx.Done():
		t.Fatal("the producer never retired")
	}
	if s.Outcome() != streaming.RetireSent {
		t.Fatalf("outcome %v, want Sent", s.Outcome())
	}
}

// The consumer's cancel reaches the producer: its Cancelled fires and a
// send fails with ErrCancelled.
func TestGRPCFrameTransportCancelReachesProducer(t *testing.T) {
	consumer, producer, _ := grpcFramePair(t)
	a, err := streaming.CreateAnchor[int](consumer.Streams)
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	s, err := streaming.AttachAnchor[int](ctx, producer.Streams, a.Handle())
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Send(ctx, 1); err != nil {
		t.Fatal(err)
	}
	if _, err := a.Next(ctx); err != nil {
		t.Fatal(err)
	}
	a.Controller().Cancel()
	select {
	case <-s.Cancelled():
	case <-ctx.Done():
		t.Fatal("the cancel never reached the producer")
	}
	if err := s.Send(ctx, 2); !errors.Is(err, streaming.ErrCancelled) {
		t.Fatalf("Send after the cancel = %v, want ErrCancelled", err)
	}
}

// A producer whose streams are cut with nothing said (its process died)
// leaves the consumer with ErrSenderDropped at once, not at the
// heartbeat watchdog.
func TestGRPCFrameTransportKilledProducer(t *testing.T) {
	consumer, producer, prodFT := grpcFramePair(t)
	a, err := streaming.CreateAnchor[int](consumer.Streams)
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	s, err := streaming.AttachAnchor[int](ctx, producer.Streams, a.Handle())
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Send(ctx, 1); err != nil {
		t.Fatal(err)
	}
	if _, err := a.Next(ctx); err != nil {
		t.Fatal(err)
	}
	prodFT.kill()
	// Well under the watchdog's three 5 s windows.
	nctx, ncancel := context.WithTimeout(ctx, 5*time.Second)
	defer ncancel()
	if _, err := a.Next(nctx); !errors.Is(err, streaming.ErrSenderDropped) {
		t.Fatalf("Next after the producer died = %v, want ErrSenderDropped", err)
	}
}

// A producer on the gRPC frame transport and a consumer on TCP share no
// per-stream transport: the attach fails with a clear error.
func TestFrameTransportMismatchIsAClearError(t *testing.T) {
	consumer := newTCPNodeNoMux(t)
	producer, _ := grpcFrameNode(t)
	if err := producer.RegisterPeer(consumer.PeerInfo()); err != nil {
		t.Fatal(err)
	}
	a, err := streaming.CreateAnchor[int](consumer.Streams)
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	_, err = streaming.AttachAnchor[int](ctx, producer.Streams, a.Handle())
	if !errors.Is(err, ext.ErrNoEndpoint) {
		t.Fatalf("attach across frame transports = %v, want ext.ErrNoEndpoint", err)
	}
}

func newTCPNodeNoMux(t *testing.T) *velo.Node { return newTCPNodeNoMuxWith(t, nil) }

// newTCPNodeNoMuxWith is a node on TCP with the mux off, its per-stream
// path over ft (TCP when nil).
func newTCPNodeNoMuxWith(t *testing.T, ft ext.FrameTransport) *velo.Node {
	t.Helper()
	tr, err := tcp.New()
	if err != nil {
		t.Fatal(err)
	}
	opts := []velo.Option{velo.WithTransport(tr), velo.WithMux(streaming.MuxConfig{Disabled: true}), velo.WithLogger(slog.New(slog.DiscardHandler))}
	if ft != nil {
		opts = append(opts, velo.WithFrameTransport(ft))
	}
	n, err := velo.New(context.Background(), opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		n.Shutdown(ctx)
	})
	return n
}

// unconfirming wraps a frame transport whose inbound streams never end
// until release: the consumer's node takes the whole stream, but its gRPC
// server never ends the call (a consumer wedged after its terminal).
type unconfirming struct {
	ext.FrameTransport
	release chan struct{}
}

func (u *unconfirming) Listen(addr string) (ext.FrameListener, error) {
	ln, err := u.FrameTransport.Listen(addr)
	if err != nil {
		return nil, err
	}
	return &unconfirmingListener{FrameListener: ln, release: u.release}, nil
}

type unconfirmingListener struct {
	ext.FrameListener
	release chan struct{}
}

func (l *unconfirmingListener) Accept() (ext.FrameInbound, error) {
	in, err := l.FrameListener.Accept()
	if err != nil {
		return nil, err
	}
	return &unconfirmingInbound{FrameInbound: in, release: l.release}, nil
}

type unconfirmingInbound struct {
	ext.FrameInbound
	release chan struct{}
	once    sync.Once
}

// Confirm and Close end the stream only once the test releases it (or
// the node shuts down the listener, which ends every call at once).
func (in *unconfirmingInbound) Confirm() error { return in.held() }
func (in *unconfirmingInbound) Close() error   { return in.held() }

func (in *unconfirmingInbound) held() error {
	in.once.Do(func() {
		go func() {
			<-in.release
			in.FrameInbound.Close()
		}()
	})
	return nil
}

// A producer over gRPC whose consumer's server never ends the call
// retires Discarded once the terminal ack bound passes, though the
// consumer read every item and the end: Sent would claim a confirmation
// that never came. The same stream with a server that confirms retires
// Sent (TestGRPCFrameTransportStreams200InOrder).
func TestGRPCFrameTransportUnconfirmedRetiresDiscarded(t *testing.T) {
	release := make(chan struct{})
	t.Cleanup(func() { close(release) })
	newNode := func(ft ext.FrameTransport) *velo.Node {
		tr, err := tcp.New()
		if err != nil {
			t.Fatal(err)
		}
		n, err := velo.New(context.Background(), velo.WithTransport(tr), velo.WithFrameTransport(ft),
			velo.WithMux(streaming.MuxConfig{Disabled: true}), velo.WithLogger(slog.New(slog.DiscardHandler)))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() {
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			n.Shutdown(ctx)
		})
		return n
	}
	consumer := newNode(&unconfirming{FrameTransport: grpctr.NewFrameTransport(), release: release})
	// A short bound, so the test need not wait the 20 s default.
	producer := newNode(grpctr.NewFrameTransport(grpctr.WithTerminalAckTimeout(200 * time.Millisecond)))
	if err := producer.RegisterPeer(consumer.PeerInfo()); err != nil {
		t.Fatal(err)
	}
	a, err := streaming.CreateAnchor[int](consumer.Streams)
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	s, err := streaming.AttachAnchor[int](ctx, producer.Streams, a.Handle())
	if err != nil {
		t.Fatal(err)
	}
	for i := range 3 {
		if err := s.Send(ctx, i); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.Finalize(); err != nil {
		t.Fatal(err)
	}
	for i := range 3 {
		if v, err := a.Next(ctx); err != nil || v != i {
			t.Fatalf("item %d = %d, %v", i, v, err)
		}
	}
	if _, err := a.Next(ctx); !errors.Is(err, io.EOF) {
		t.Fatalf("after the last item: %v, want io.EOF", err)
	}
	select {
	case <-s.Retired():
	case <-ctx.Done():
		t.Fatal("the producer never retired")
	}
	if out := s.Outcome(); out != streaming.RetireDiscarded {
		t.Fatalf("outcome %v, want Discarded: the server never confirmed", out)
	}
}

// grpcGoroutinesPerStream is what one open stream over the gRPC frame
// transport costs in goroutines, both nodes together, read off a goroutine
// profile: the path's egress pump and reader (2, as over TCP); the
// transport's response watcher, call handler and request reader (3); and
// grpc-go's for the client connection each stream has of its own, as in
// the reference (its reader, writer, keep-alive, the call's context
// watcher and three of the connection's own) and for the server's side of
// it (reader, writer, keep-alive): 10.
const grpcGoroutinesPerStream = 15

// Open streams over the gRPC frame transport cost a fixed number of
// goroutines each, and none once they ended: no goroutine per frame, and
// none of the path's beyond its pump and reader (the per-stream watcher
// of the old TCP path is gone; the pump watches the transport's Closed
// between batches).
func TestGRPCFrameTransportGoroutinesPerStream(t *testing.T) {
	consumer, producer, _ := grpcFramePair(t)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	open := func() (*streaming.Anchor[int], *streaming.Sender[int]) {
		a, err := streaming.CreateAnchor[int](consumer.Streams)
		if err != nil {
			t.Fatal(err)
		}
		s, err := streaming.AttachAnchor[int](ctx, producer.Streams, a.Handle())
		if err != nil {
			t.Fatal(err)
		}
		for i := range 3 { // the reader is up, and frames cost nothing more
			if err := s.Send(ctx, i); err != nil {
				t.Fatal(err)
			}
			if _, err := a.Next(ctx); err != nil {
				t.Fatal(err)
			}
		}
		return a, s
	}
	// The first streams set up the messenger's connections and workers,
	// which then park: the count is the growth from there.
	const first, n, slack = 5, 20, 4
	anchors := make([]*streaming.Anchor[int], 0, first+n)
	senders := make([]*streaming.Sender[int], 0, first+n)
	for range first {
		a, s := open()
		anchors, senders = append(anchors, a), append(senders, s)
	}
	base := runtime.NumGoroutine()
	for range n {
		a, s := open()
		anchors, senders = append(anchors, a), append(senders, s)
	}
	got := runtime.NumGoroutine()
	t.Logf("%d more open streams: %d goroutines over %d, %.2f per stream", n, got, base, float64(got-base)/n)
	if want := base + grpcGoroutinesPerStream*n; got > want+slack || got < want-slack {
		t.Fatalf("%d more open streams: %d goroutines over %d, want about %d (%d per stream)", n, got, base, want, grpcGoroutinesPerStream)
	}
	base -= first * grpcGoroutinesPerStream // what runs without a stream
	for i, s := range senders {
		s.Finalize()
		if _, err := anchors[i].Next(ctx); !errors.Is(err, io.EOF) {
			t.Fatalf("stream %d: %v", i, err)
		}
		<-s.Retired()
		anchors[i].Close()
	}
	testwait.Until(t, "the ended streams' goroutines to leave", func() bool { return runtime.NumGoroutine() <= base+slack })
}
