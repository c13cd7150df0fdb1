package streaming

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/velo-go/velo/ext"
	"github.com/velo-go/velo/internal/msgrx"
	wire "github.com/velo-go/velo/internal/streamwire"
	"github.com/velo-go/velo/messenger"
	"github.com/velo-go/velo/transport/tcp"
)

// remoteNode is a messenger over TCP on loopback with a NodeManager: what
// velo.New builds, without the facade (which imports this package).
type remoteNode struct {
	msg *messenger.Messenger
	sm  *Manager
}

func newMessenger(t testing.TB) *messenger.Messenger {
	t.Helper()
	msg, _ := newMessengerTCP(t)
	return msg
}

// newMessengerTCP is a messenger over TCP with opts, shut down when the
// test ends, and its transport (which a test may shut down itself).
func newMessengerTCP(t testing.TB, opts ...tcp.Option) (*messenger.Messenger, *tcp.Transport) {
	t.Helper()
	tr, err := tcp.New(opts...)
	if err != nil {
		t.Fatal(err)
	}
	msg, err := messenger.New(context.Background(), messenger.Config{Transports: []ext.Transport{tr}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		msg.Shutdown(ctx)
	})
	return msg, tr
}

// muxNodeOn is a node over msg with the mux on, closed when the test ends.
func muxNodeOn(t *testing.T, msg *messenger.Messenger) *remoteNode {
	t.Helper()
	sm, err := NewNodeManager(msg, WithMux(MuxConfig{}))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { sm.Close() })
	return &remoteNode{msg: msg, sm: sm}
}

func newRemoteNode(t *testing.T, opts ...ManagerOption) *remoteNode {
	t.Helper()
	msg := newMessenger(t)
	// The per-stream suite runs with the mux off; mux tests turn it on
	// with a later WithMux.
	opts = append([]ManagerOption{WithMux(MuxConfig{Disabled: true})}, opts...)
	sm, err := NewNodeManager(msg, opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { sm.Close() })
	return &remoteNode{msg: msg, sm: sm}
}

// connect registers each node with the other.
func connect(t *testing.T, ms ...*messenger.Messenger) {
	t.Helper()
	for _, a := range ms {
		for _, b := range ms {
			if a != b {
				if err := a.RegisterPeer(b.PeerInfo()); err != nil {
					t.Fatal(err)
				}
			}
		}
	}
}

func twoNodes(t *testing.T) (producer, consumer *remoteNode) {
	producer, consumer = newRemoteNode(t), newRemoteNode(t)
	// Only the producer knows the consumer, as when the handle came in a
	// request: the attach's handshake introduces the producer.
	if err := producer.msg.RegisterPeer(consumer.msg.PeerInfo()); err != nil {
		t.Fatal(err)
	}
	return producer, consumer
}

func attachRemoteT[T any](t *testing.T, producer *remoteNode, h wire.AnchorHandle) *Sender[T] {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	s, err := AttachAnchor[T](ctx, producer.sm, h)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

func nextItemWithin[T any](t *testing.T, a *Anchor[T], d time.Duration) (T, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	return a.Next(ctx)
}

// TestRemoteDetachReattach: a producer on another node detaches; the
// anchor waits; a second attach (from the same node) goes on with the
// same stream.
func TestRemoteDetachReattach(t *testing.T) {
	producer, consumer := twoNodes(t)
	a, err := CreateAnchor[point](consumer.sm)
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	ctx := context.Background()
	s1 := attachRemoteT[point](t, producer, a.Handle())
	if err := s1.Send(ctx, point{1, 2}); err != nil {
		t.Fatal(err)
	}
	// Attached: a second producer is refused, as on the same worker.
	if _, err := AttachAnchor[point](ctx, producer.sm, a.Handle()); !errors.Is(err, ErrAlreadyAttached) {
		t.Fatalf("second attach: %v, want ErrAlreadyAttached", err)
	}
	if err := s1.Detach(); err != nil {
		t.Fatal(err)
	}
	if v, err := nextItemWithin(t, a, 5*time.Second); err != nil || v != (point{1, 2}) {
		t.Fatalf("Next = %v, %v", v, err)
	}
	// The Detached frame is consumed by the anchor; retry the attach until
	// the owner has read it (the detach is asynchronous over the wire).
	var s2 *Sender[point]
	deadline := time.Now().Add(5 * time.Second)
	for {
		s2, err = AttachAnchor[point](ctx, producer.sm, a.Handle())
		if err == nil {
			break
		}
		if !errors.Is(err, ErrAlreadyAttached) || time.Now().After(deadline) {
			t.Fatalf("re-attach: %v", err)
		}
		time.Sleep(time.Millisecond)
	}
	defer s2.Close()
	if err := s2.Send(ctx, point{3, 4}); err != nil {
		t.Fatal(err)
	}
	if err := s2.Finalize(); err != nil {
		t.Fatal(err)
	}
	if v, err := nextItemWithin(t, a, 5*time.Second); err != nil || v != (point{3, 4}) {
		t.Fatalf("Next = %v, %v", v, err)
	}
	if _, err := nextItemWithin(t, a, 5*time.Second); err != io.EOF {
		t.Fatalf("want io.EOF, got %v", err)
	}
	// An attach to an anchor that ended is refused as not found.
	if _, err := AttachAnchor[point](ctx, producer.sm, a.Handle()); !errors.Is(err, ErrAnchorNotFound) {
		t.Fatalf("attach after the end: %v, want ErrAnchorNotFound", err)
	}
}

// dialStream makes the attach round trip by hand and opens the stream's
// connection, as a producer would, returning the raw connection: a test
// can then cut it as a dying process would (the kernel closes its
// sockets).
func dialStream(t *testing.T, producer *messenger.Messenger, owner *remoteNode, h wire.AnchorHandle) net.Conn {
	t.Helper()
	req := wire.AttachRequest{Handle: h, SessionID: 9, CancelHandle: wire.NewCancelHandle(producer.WorkerID(), 9)}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	body, err := producer.Unary(ctx, owner.msg.InstanceID(), wire.AnchorAttachHandler, req.AppendJSON(nil))
	if err != nil {
		t.Fatal(err)
	}
	resp, err := wire.DecodeAttachResponse(body)
	if err != nil || resp.Refused || resp.TransportKey != wire.TCPStreamKey || resp.RoutingSessionID == 0 {
		// An empty offer gets the default transport.
		t.Fatalf("attach answer %+v, %v", resp, err)
	}
	c, err := net.Dial("tcp", owner.sm.streamAddr().String())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	b := wire.TCPPreamble{AnchorID: h.LocalID(), SessionID: resp.RoutingSessionID}.Append(nil)
	b = wire.AppendTCPFrame(b, wire.AppendBytesItem(nil, []byte("a")))
	if _, err := c.Write(b); err != nil {
		t.Fatal(err)
	}
	return c
}

// TestRemoteProducerKilled: the producer's connection closes without a
// terminal, as when its process dies. The consumer sees ErrSenderDropped
// within 100 ms of the close.
func TestRemoteProducerKilled(t *testing.T) {
	consumer := newRemoteNode(t)
	raw := newMessenger(t)
	connect(t, raw, consumer.msg)
	a, err := CreateAnchor[[]byte](consumer.sm)
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	c := dialStream(t, raw, consumer, a.Handle())
	if v, err := nextItemWithin(t, a, 5*time.Second); err != nil || string(v) != "a" {
		t.Fatalf("Next = %q, %v", v, err)
	}
	c.(*net.TCPConn).SetLinger(0) // a reset, as a killed process may leave
	closed := time.Now()
	c.Close()
	_, err = nextItemWithin(t, a, 5*time.Second)
	if took := time.Since(closed); took > 100*time.Millisecond {
		t.Fatalf("end seen %v after the close, want within 100ms", took)
	}
	if !errors.Is(err, ErrSenderDropped) {
		t.Fatalf("want ErrSenderDropped, got %v", err)
	}
}

// TestRemoteCancelBeforeConnect: a cancel made before the producer's
// connection arrives is kept: the producer sees it once connected.
func TestRemoteCancelBeforeAttach(t *testing.T) {
	producer, consumer := twoNodes(t)
	a, err := CreateAnchor[[]byte](consumer.sm)
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	a.Controller().Cancel()
	s := attachRemoteT[[]byte](t, producer, a.Handle())
	select {
	case <-s.Cancelled():
	case <-time.After(5 * time.Second):
		t.Fatal("the producer did not see the earlier cancel")
	}
}

// TestRemoteItemTooLarge: an item whose frame is over 16 MiB is refused at
// send with *ItemTooLargeError, nothing is sent, and the stream goes on.
func TestRemoteItemTooLarge(t *testing.T) {
	producer, consumer := twoNodes(t)
	a, err := CreateAnchor[[]byte](consumer.sm)
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	s := attachRemoteT[[]byte](t, producer, a.Handle())
	big := make([]byte, wire.MaxTCPFrame) // its frame is 11 bytes longer (the byte item header)
	var tl *ItemTooLargeError
	if err := s.Send(context.Background(), big); !errors.As(err, &tl) || tl.Limit != wire.MaxTCPFrame || tl.Size != len(big)+11 {
		t.Fatalf("Send of a 16 MiB item: %v", err)
	}
	if err := s.SendBytes(context.Background(), big); !errors.As(err, &tl) {
		t.Fatalf("SendBytes of a 16 MiB item: %v", err)
	}
	// The largest item that fits goes through.
	fits := big[:wire.MaxTCPFrame-11]
	if err := s.Send(context.Background(), fits); err != nil {
		t.Fatal(err)
	}
	if err := s.Finalize(); err != nil {
		t.Fatal(err)
	}
	if v, err := nextItemWithin(t, a, 10*time.Second); err != nil || len(v) != len(fits) {
		t.Fatalf("Next: %d bytes, %v", len(v), err)
	}
	if _, err := nextItemWithin(t, a, 5*time.Second); err != io.EOF {
		t.Fatalf("want io.EOF, got %v", err)
	}
}

// TestRemoteWireGolden: the bytes a producer writes on the per-stream
// connection are the 16-byte preamble (anchor local id, the routing
// session the owner answered, both big-endian), then each stream frame as
// a messenger frame of type Message with an empty header. The owner here
// is a raw listener advertised under "tcp-stream" and a hand-written
// _anchor_attach handler.
func TestRemoteWireGolden(t *testing.T) {
	producer := newRemoteNode(t)
	owner := newMessenger(t)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	ap := ln.Addr().(*net.TCPAddr)
	ep := tcp.EncodeEndpoint([]tcp.Interface{{IP: "127.0.0.1", Port: uint16(ap.Port), PrefixLen: 32}})
	if err := msgrx.AdvertiseAddress(owner, wire.TCPStreamKey, ep); err != nil {
		t.Fatal(err)
	}
	offered := make(chan []string, 1)
	msgrx.RegisterSystem(owner, messenger.UnaryHandler(wire.AnchorAttachHandler, func(c *messenger.Context) ([]byte, error) {
		req, err := wire.DecodeAttachRequest(c.Payload)
		if err != nil {
			return nil, err
		}
		offered <- req.SupportedTransportKeys
		resp := wire.AttachResponse{TransportKey: wire.TCPStreamKey, HeartbeatIntervalMS: 5000, RoutingSessionID: 0x0102030405060708}
		return resp.AppendJSON(nil), nil
	}))
	connect(t, producer.msg, owner)

	h := wire.NewAnchorHandle(owner.WorkerID(), 0x1122334455667788)
	got := make(chan []byte, 1)
	go func() {
		c, err := ln.Accept()
		if err != nil {
			got <- nil
			return
		}
		defer c.Close()
		b, _ := io.ReadAll(c)
		got <- b
	}()
	s := attachRemoteT[[]byte](t, producer, h)
	if keys := <-offered; strings.Join(keys, ",") != wire.TCPStreamKey {
		t.Fatalf("offered %q", keys)
	}
	ctx := context.Background()
	s.Send(ctx, []byte("hi"))
	s.SendError(ctx, "e")
	s.Finalize()
	want := []byte{
		0x11, 0x22, 0x33, 0x44, 0x55, 0x66, 0x77, 0x88, // anchor local id
		0x01, 0x02, 0x03, 0x04, 0x05, 0x06, 0x07, 0x08, // routing session id
		0x00, 0x01, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x0a, // schema 1, Message, header 0, payload 10
		0x81, 0xa4, 'I', 't', 'e', 'm', 0xc4, 0x02, 'h', 'i',
		0x00, 0x01, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x0f,
		0x81, 0xab, 'S', 'e', 'n', 'd', 'e', 'r', 'E', 'r', 'r', 'o', 'r', 0xa1, 'e',
		0x00, 0x01, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x0a,
		0xa9, 'F', 'i', 'n', 'a', 'l', 'i', 'z', 'e', 'd',
	}
	select {
	case b := <-got:
		if !bytes.Equal(b, want) {
			t.Fatalf("connection bytes\n got % x\nwant % x", b, want)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the producer did not close the connection after the terminal")
	}
}

// TestRemoteUnknownPreamble: a connection whose preamble names no bound
// stream is closed, and a bound stream is not disturbed by it.
func TestRemoteUnknownPreamble(t *testing.T) {
	consumer := newRemoteNode(t)
	c, err := net.Dial("tcp", consumer.sm.streamAddr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.Write(wire.TCPPreamble{AnchorID: 1, SessionID: 1}.Append(nil))
	c.SetReadDeadline(time.Now().Add(5 * time.Second))
	if _, err := c.Read(make([]byte, 1)); err != io.EOF {
		t.Fatalf("want the owner to close the connection (io.EOF), got %v", err)
	}
}

// TestRemoteAcceptWindow: a stream bound by _anchor_attach whose
// connection never arrives ends with ErrSenderDropped after the accept
// window.
func TestRemoteAcceptWindow(t *testing.T) {
	consumer := newRemoteNode(t, withAcceptWindow(20*time.Millisecond))
	raw := newMessenger(t)
	connect(t, raw, consumer.msg)
	a, err := CreateAnchor[[]byte](consumer.sm)
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	req := wire.AttachRequest{Handle: a.Handle(), SessionID: 1, CancelHandle: wire.NewCancelHandle(raw.WorkerID(), 1)}
	if _, err := raw.Unary(context.Background(), consumer.msg.InstanceID(), wire.AnchorAttachHandler, req.AppendJSON(nil)); err != nil {
		t.Fatal(err)
	}
	if _, err := nextItemWithin(t, a, 5*time.Second); !errors.Is(err, ErrSenderDropped) {
		t.Fatalf("want ErrSenderDropped, got %v", err)
	}
}

// waitGoroutines waits until at most n goroutines run (those of finished
// streams exit after their connection closes), and returns the count.
func waitGoroutines(n int) int {
	deadline := time.Now().Add(5 * time.Second)
	for {
		got := runtime.NumGoroutine()
		if got <= n || time.Now().After(deadline) {
			return got
		}
		time.Sleep(time.Millisecond)
	}
}

// TestRemoteGoroutinesPerStream: a live remote stream costs three
// goroutines in all (the producer's pump and watcher, the consumer's
// reader), and a finished one none.
func TestRemoteGoroutinesPerStream(t *testing.T) {
	producer, consumer := twoNodes(t)
	ctx := context.Background()
	stream := func() (*Anchor[[]byte], *Sender[[]byte]) {
		a, err := CreateAnchor[[]byte](consumer.sm)
		if err != nil {
			t.Fatal(err)
		}
		s, err := AttachAnchor[[]byte](ctx, producer.sm, a.Handle())
		if err != nil {
			t.Fatal(err)
		}
		if err := s.Send(ctx, []byte("x")); err != nil {
			t.Fatal(err)
		}
		if _, err := nextItemWithin(t, a, 5*time.Second); err != nil { // the reader is up
			t.Fatal(err)
		}
		return a, s
	}
	// A first stream sets up the messenger's connections and workers.
	a, s := stream()
	s.Finalize()
	a.Next(ctx)
	a.Close()
	// The messenger's handler workers park and leave on their own, and the
	// first stream's goroutines may still be leaving: allow a few either
	// way.
	const slack = 8
	base := runtime.NumGoroutine()
	const n = 100
	anchors := make([]*Anchor[[]byte], 0, n)
	senders := make([]*Sender[[]byte], 0, n)
	for range n {
		a, s := stream()
		anchors, senders = append(anchors, a), append(senders, s)
	}
	if got := runtime.NumGoroutine(); got > base+3*n+slack || got < base+3*n-slack {
		t.Fatalf("%d live remote streams: %d goroutines, baseline %d, want about %d", n, got, base, base+3*n)
	}
	for i, s := range senders {
		s.Finalize()
		if _, err := nextItemWithin(t, anchors[i], 5*time.Second); err != io.EOF {
			t.Fatalf("stream %d: %v", i, err)
		}
		anchors[i].Close()
	}
	if got := waitGoroutines(base + slack); got > base+slack {
		t.Fatalf("after %d finished remote streams: %d goroutines, baseline %d", n, got, base)
	}
	if got := consumer.sm.activeAnchors(); got != 0 {
		t.Fatalf("ActiveAnchors = %d after every stream ended", got)
	}
}

// TestRemoteBadFrame: a per-stream frame with a header (the reference
// never writes one) ends the stream with a *TransportError; the node
// goes on.
func TestRemoteBadFrame(t *testing.T) {
	consumer := newRemoteNode(t)
	raw := newMessenger(t)
	connect(t, raw, consumer.msg)
	a, err := CreateAnchor[[]byte](consumer.sm)
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	c := dialStream(t, raw, consumer, a.Handle())
	if _, err := nextItemWithin(t, a, 5*time.Second); err != nil {
		t.Fatal(err)
	}
	bad := []byte{0, 1, 0, 0, 0, 0, 1, 0, 0, 0, 0, 'h'} // Message, a 1-byte header, no payload
	if _, err := c.Write(bad); err != nil {
		t.Fatal(err)
	}
	var te *TransportError
	if _, err := nextItemWithin(t, a, 5*time.Second); !errors.As(err, &te) {
		t.Fatalf("want a *TransportError, got %v", err)
	}
}

// TestRemoteCancelBeforeConnectResent: a producer that attaches to an
// anchor already cancelled gets _stream_cancel with the attach answer and
// again when its connection arrives. A Rust producer registers the sender
// the message names only once connected, so in the live interop run the
// first message alone never fired its cancellation token.
func TestRemoteCancelBeforeConnectResent(t *testing.T) {
	consumer := newRemoteNode(t)
	raw := newMessenger(t)
	got := make(chan []byte, 4)
	spy := messenger.FireHandler(wire.StreamCancelHandler, func(c *messenger.Context) {
		got <- append([]byte(nil), c.Payload...)
	})
	if err := msgrx.RegisterSystem(raw, spy); err != nil {
		t.Fatal(err)
	}
	connect(t, raw, consumer.msg)
	a, err := CreateAnchor[[]byte](consumer.sm)
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	a.Controller().Cancel()
	c := dialStream(t, raw, consumer, a.Handle())
	for i := range 2 {
		select {
		case p := <-got:
			if want := `{"sender_stream_id":9}`; string(p) != want {
				t.Fatalf("_stream_cancel %d: body %s, want %s", i, p, want)
			}
		case <-time.After(5 * time.Second):
			t.Fatalf("_stream_cancel %d never came", i)
		}
	}
	// And the connection is closed: the backstop.
	c.SetReadDeadline(time.Now().Add(5 * time.Second))
	if _, err := c.Read(make([]byte, 1)); err == nil {
		t.Fatal("the connection to a cancelled anchor stayed open")
	}
}
