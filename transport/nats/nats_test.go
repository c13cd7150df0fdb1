package nats_test

import (
	"bytes"
	"context"
	"errors"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	natsgo "github.com/nats-io/nats.go"
	"go.uber.org/goleak"

	"github.com/velo-go/velo/ext"
	"github.com/velo-go/velo/internal/embedded"
	"github.com/velo-go/velo/transport/nats"
	"github.com/velo-go/velo/transport/transporttest"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// testMaxPayload lets the suite's 8 MiB frames through; nats-server's
// default is 1 MiB.
const testMaxPayload = 16 << 20

// startServer runs an embedded nats-server for one test, without
// JetStream, which the transport does not use.
func startServer(t testing.TB, tune ...func(*server.Options)) *embedded.NATS {
	t.Helper()
	tune = append([]func(*server.Options){func(o *server.Options) {
		o.JetStream = false
		o.MaxPayload = testMaxPayload
		o.MaxPending = 1 << 30
	}}, tune...)
	s, err := embedded.StartNATS(t.TempDir(), tune...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Stop)
	return s
}

func options(o transporttest.Options) []nats.Option {
	var opts []nats.Option
	if o.Lanes > 0 {
		opts = append(opts, nats.WithLanes(o.Lanes))
	}
	if o.ChannelBytes > 0 {
		opts = append(opts, nats.WithChannelBytes(o.ChannelBytes))
	}
	if o.TeardownGrace > 0 {
		opts = append(opts, nats.WithTeardownGrace(o.TeardownGrace))
	}
	if o.MaxFrameSize > 0 {
		opts = append(opts, nats.WithMaxFrameSize(o.MaxFrameSize))
	}
	return opts
}

// The whole conformance suite, every transport dialling its own
// connection (WithURL) to one embedded server. There is no raw socket to a
// peer (DialRaw: malformed input is TestMalformedInboundIsCounted) and no
// connection per peer to kill (Kill: see TestDeadPeer); the broker buffers
// for a stalled receiver (Brokered: see TestBackpressureWhileServerAway).
func TestConformance(t *testing.T) {
	srv := startServer(t)
	transporttest.Run(t, transporttest.Factory{
		New: func(t testing.TB, o transporttest.Options) ext.Transport {
			tr, err := nats.New(append(options(o), nats.WithURL(srv.URL()))...)
			if err != nil {
				t.Fatal(err)
			}
			return tr
		},
		Brokered: true,
	})
}

// node is a started transport with its adapter, outside the suite.
type node struct {
	id      ext.InstanceID
	tr      *nats.Transport
	adapter *ext.TransportAdapter
	state   *ext.ShutdownState
	info    ext.PeerInfo
}

func startNode(t testing.TB, opts ...nats.Option) *node {
	t.Helper()
	tr, err := nats.New(opts...)
	if err != nil {
		t.Fatal(err)
	}
	n := &node{id: ext.NewInstanceID(), tr: tr, state: ext.NewShutdownState()}
	n.adapter = ext.NewTransportAdapter(n.state, ext.AdapterConfig{})
	tr.BindInstance(n.id)
	ep, err := tr.Start(context.Background(), n.adapter)
	if err != nil {
		t.Fatal(err)
	}
	n.info = ext.PeerInfo{InstanceID: n.id, Address: ext.WorkerAddress{nats.Key: ep}}
	t.Cleanup(func() {
		tr.Shutdown()
		n.adapter.Close()
	})
	return n
}

func ctxT(t testing.TB) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	t.Cleanup(cancel)
	return ctx
}

func connect(t testing.TB, url string, opts ...natsgo.Option) *natsgo.Conn {
	t.Helper()
	nc, err := natsgo.Connect(url, opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	return nc
}

// The entry a node advertises is its inbound subject, named after the
// instance the node bound, and the subscription is live when Start
// returns: a message published right then arrives.
func TestAddressIsTheInboundSubject(t *testing.T) {
	srv := startServer(t)
	n := startNode(t, nats.WithURL(srv.URL()), nats.WithClusterID("prod"))
	want := nats.InboundSubject("prod", n.id)
	if got := string(n.info.Address[nats.Key]); got != want || n.tr.Subject() != want {
		t.Fatalf("entry %q, want %q", got, want)
	}
	nc := connect(t, srv.URL())
	msg := &natsgo.Msg{Subject: want, Header: natsgo.Header{nats.HeaderType: {"3"}, nats.HeaderLen: {"2"}}, Data: []byte("hdbody")}
	if err := nc.PublishMsg(msg); err != nil {
		t.Fatal(err)
	}
	f, err := n.adapter.Events().Pop(ctxT(t))
	if err != nil {
		t.Fatal(err)
	}
	if f.Type != ext.Event || string(f.Header) != "hd" || string(f.Payload) != "body" {
		t.Fatalf("got type %v header %q payload %q", f.Type, f.Header, f.Payload)
	}
}

// What a sender puts on the wire is what the reference reads: one message
// per frame on the peer's subject, headers Velo-Type and Velo-HLen in
// decimal, payload the header then the payload; a request names the
// sender's inbound subject as its reply.
func TestWireFormat(t *testing.T) {
	srv := startServer(t)
	tx := startNode(t, nats.WithURL(srv.URL()))
	nc := connect(t, srv.URL())
	peer := ext.NewInstanceID()
	subject := nats.InboundSubject(nats.DefaultClusterID, peer)
	sub, err := nc.SubscribeSync(subject)
	if err != nil {
		t.Fatal(err)
	}
	nc.Flush()
	if err := tx.tr.Register(ext.PeerInfo{InstanceID: peer, Address: ext.WorkerAddress{nats.Key: []byte(subject)}}); err != nil {
		t.Fatal(err)
	}
	for _, f := range []ext.Frame{
		{Type: ext.Message, Header: []byte("head"), Payload: []byte("payload")},
		{Type: ext.Response, Header: []byte("h2"), Payload: nil},
		{Type: ext.Event, Payload: []byte("only")},
	} {
		if _, err := tx.tr.Send(peer, f); err != nil {
			t.Fatal(err)
		}
		m, err := sub.NextMsg(10 * time.Second)
		if err != nil {
			t.Fatal(err)
		}
		wantType := []string{string('0' + byte(f.Type))}
		wantLen := []string{string('0' + byte(len(f.Header)))}
		wantReply := ""
		if f.Type == ext.Message {
			wantReply = tx.tr.Subject()
		}
		if !equal(m.Header[nats.HeaderType], wantType) || !equal(m.Header[nats.HeaderLen], wantLen) ||
			!bytes.Equal(m.Data, append(bytes.Clone(f.Header), f.Payload...)) || m.Reply != wantReply {
			t.Fatalf("frame %v on the wire: headers %v data %q reply %q", f.Type, m.Header, m.Data, m.Reply)
		}
	}
}

func equal(a, b []string) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// Malformed inbound messages (no headers, a bad or missing Velo-Type, a
// bad or missing Velo-HLen, one longer than the payload, one too large
// for any integer) are dropped and counted, and cost nothing else: a good
// frame behind them arrives, and nothing else reached the node.
func TestMalformedInboundIsCounted(t *testing.T) {
	srv := startServer(t)
	rx := startNode(t, nats.WithURL(srv.URL()))
	nc := connect(t, srv.URL())
	subject := rx.tr.Subject()
	bad := []natsgo.Header{
		nil,
		{nats.HeaderLen: {"0"}},
		{nats.HeaderType: {"0"}},
		{nats.HeaderType: {"5"}, nats.HeaderLen: {"0"}},
		{nats.HeaderType: {"-1"}, nats.HeaderLen: {"0"}},
		{nats.HeaderType: {"message"}, nats.HeaderLen: {"0"}},
		{nats.HeaderType: {"0"}, nats.HeaderLen: {"x"}},
		{nats.HeaderType: {"0"}, nats.HeaderLen: {"-3"}},
		{nats.HeaderType: {"0"}, nats.HeaderLen: {"5"}}, // the payload has 4 bytes
		{nats.HeaderType: {"0"}, nats.HeaderLen: {"99999999999999999999999"}},
		{nats.HeaderType: {"0"}, nats.HeaderLen: {"9223372036854775807"}},
	}
	for _, h := range bad {
		if err := nc.PublishMsg(&natsgo.Msg{Subject: subject, Header: h, Data: []byte("abcd")}); err != nil {
			t.Fatal(err)
		}
	}
	good := &natsgo.Msg{Subject: subject, Header: natsgo.Header{nats.HeaderType: {"0"}, nats.HeaderLen: {"4"}}, Data: []byte("abcd")}
	if err := nc.PublishMsg(good); err != nil {
		t.Fatal(err)
	}
	m, err := rx.adapter.Messages().Pop(ctxT(t))
	if err != nil {
		t.Fatal(err)
	}
	if string(m.Header) != "abcd" || len(m.Payload) != 0 {
		t.Fatalf("good frame arrived as header %q payload %q", m.Header, m.Payload)
	}
	m.Done()
	// One subscription delivers in order: the bad ones were handled first.
	if got := rx.tr.Stats().Malformed; got != uint64(len(bad)) {
		t.Fatalf("Malformed = %d, want %d", got, len(bad))
	}
	if rx.adapter.Messages().Len() != 0 || rx.adapter.Events().Len() != 0 || rx.adapter.Responses().Len() != 0 {
		t.Fatal("a malformed message reached the node")
	}
	if s := rx.state.InFlight(); s != 0 {
		t.Fatalf("in flight %d after the good frame was done", s)
	}
}

// A sender that names no reply subject (the reference's does not) gets no
// echo from a draining receiver: the request is dropped and counted.
func TestDrainWithoutReplyIsDropped(t *testing.T) {
	srv := startServer(t)
	rx := startNode(t, nats.WithURL(srv.URL()))
	rx.state.BeginDrain()
	nc := connect(t, srv.URL())
	msg := &natsgo.Msg{Subject: rx.tr.Subject(), Header: natsgo.Header{nats.HeaderType: {"0"}, nats.HeaderLen: {"1"}}, Data: []byte("h")}
	if err := nc.PublishMsg(msg); err != nil {
		t.Fatal(err)
	}
	// An event behind it on the same subscription is handled after it.
	marker := &natsgo.Msg{Subject: rx.tr.Subject(), Header: natsgo.Header{nats.HeaderType: {"3"}, nats.HeaderLen: {"0"}}}
	if err := nc.PublishMsg(marker); err != nil {
		t.Fatal(err)
	}
	if _, err := rx.adapter.Events().Pop(ctxT(t)); err != nil {
		t.Fatal(err)
	}
	if s := rx.tr.Stats(); s.DrainRefused != 1 || s.DrainDropped != 1 {
		t.Fatalf("stats %+v: want the request refused and dropped", s)
	}
	if rx.adapter.Messages().Len() != 0 || rx.state.InFlight() != 0 {
		t.Fatal("the refused request reached the node")
	}
}

// Health: a live peer answers; an unknown one is ErrPeerNotRegistered; a
// peer whose subscription is gone fails at once (no responders) and
// matches ErrPeerUnreachable, without waiting for the deadline.
func TestHealth(t *testing.T) {
	srv := startServer(t)
	a := startNode(t, nats.WithURL(srv.URL()))
	b := startNode(t, nats.WithURL(srv.URL()))
	a.tr.Register(b.info)
	if err := a.tr.CheckHealth(ctxT(t), b.id); err != nil {
		t.Fatalf("health of a live peer: %v", err)
	}
	if err := a.tr.CheckHealth(ctxT(t), ext.NewInstanceID()); !errors.Is(err, ext.ErrPeerNotRegistered) {
		t.Fatalf("health of an unknown peer: %v", err)
	}
	b.tr.Shutdown()
	start := time.Now()
	err := a.tr.CheckHealth(ctxT(t), b.id)
	if !errors.Is(err, ext.ErrPeerUnreachable) || !errors.Is(err, natsgo.ErrNoResponders) {
		t.Fatalf("health of a stopped peer: %v", err)
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Fatalf("health of a stopped peer took %v", d)
	}
}

// A health request to a peer that is subscribed but never answers fails
// at the context's deadline.
func TestHealthHonoursDeadline(t *testing.T) {
	srv := startServer(t)
	a := startNode(t, nats.WithURL(srv.URL()))
	nc := connect(t, srv.URL())
	peer := ext.NewInstanceID()
	subject := nats.InboundSubject(nats.DefaultClusterID, peer)
	sub, err := nc.SubscribeSync(subject + ".health") // subscribed, silent
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Unsubscribe()
	nc.Flush()
	a.tr.Register(ext.PeerInfo{InstanceID: peer, Address: ext.WorkerAddress{nats.Key: []byte(subject)}})
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	err = a.tr.CheckHealth(ctx, peer)
	if !errors.Is(err, ext.ErrPeerUnreachable) || !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("health of a silent peer: %v", err)
	}
}

// WithConn: the transport uses the caller's connection and leaves it open
// at Shutdown, having unsubscribed.
func TestWithConnLeavesTheConnectionOpen(t *testing.T) {
	srv := startServer(t)
	nc := connect(t, srv.URL())
	before := nc.NumSubscriptions()
	n := startNode(t, nats.WithConn(nc))
	if n.tr.Conn() != nc || nc.NumSubscriptions() != before+2 {
		t.Fatalf("subscriptions %d, want %d on the caller's connection", nc.NumSubscriptions(), before+2)
	}
	n.tr.Shutdown()
	if nc.IsClosed() || nc.NumSubscriptions() != before {
		t.Fatalf("after Shutdown: closed %v, subscriptions %d", nc.IsClosed(), nc.NumSubscriptions())
	}
}

// A frame over the server's max_payload less 64 bytes is refused at Send.
func TestMaxMessageSizeFromServer(t *testing.T) {
	srv := startServer(t, func(o *server.Options) { o.MaxPayload = 1 << 20 })
	a := startNode(t, nats.WithURL(srv.URL()))
	b := startNode(t, nats.WithURL(srv.URL()))
	a.tr.Register(b.info)
	if got := a.tr.MaxMessageSize(); got != 1<<20-64 {
		t.Fatalf("MaxMessageSize = %d, want %d", got, 1<<20-64)
	}
	_, err := a.tr.Send(b.id, ext.Frame{Type: ext.Message, Header: make([]byte, 10), Payload: make([]byte, 1<<20-64-9)})
	var tl *ext.FrameTooLargeError
	if !errors.As(err, &tl) || tl.Max != 1<<20-64 {
		t.Fatalf("oversized send: %v", err)
	}
	if _, err := a.tr.Send(b.id, ext.Frame{Type: ext.Message, Payload: make([]byte, 1<<20-64)}); err != nil {
		t.Fatalf("a frame of the maximum: %v", err)
	}
	m, err := b.adapter.Messages().Pop(ctxT(t))
	if err != nil || len(m.Payload) != 1<<20-64 {
		t.Fatalf("the maximum frame: %v, %d bytes", err, len(m.Payload))
	}
	m.Done()
}
