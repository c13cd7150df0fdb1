package streaming

// MPSC over the per-stream path: the wire goldens, failed connects, and
// the control handlers.

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/velo-go/velo/ext"
	"github.com/velo-go/velo/internal/msgrx"
	wire "github.com/velo-go/velo/internal/streamwire"
	"github.com/velo-go/velo/messenger"
	"github.com/velo-go/velo/transport/tcp"
)

// TestRemoteMPSCProducerWireGolden: what a remote MPSC producer puts on
// the wire, byte for byte, against an owner played by hand: the attach
// goes to _mpsc_anchor_attach, the connection starts with the SPSC
// preamble (the local id with its MPSC bit, the routing session), and the
// frames are plain stream frames, with no SenderID.
func TestRemoteMPSCProducerWireGolden(t *testing.T) {
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
	msgrx.RegisterSystem(owner, messenger.UnaryHandler(wire.MPSCAnchorAttachHandler, func(c *messenger.Context) ([]byte, error) {
		return []byte(`{"Ok":{"streaming_transport_key":"tcp-stream","heartbeat_interval_ms":5000,"sender_id":7,"routing_session_id":72623859790382856}}`), nil
	}))
	connect(t, producer.msg, owner)
	h := wire.NewMPSCAnchorHandle(owner.WorkerID(), 0x1122334455667788)
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
	s := attachMPSCRemoteT(t, producer, h)
	if s.SenderID() != 7 {
		t.Fatalf("SenderID = %v, want the owner's 7", s.SenderID())
	}
	s.Send(context.Background(), []byte("hi"))
	s.Detach()
	want := []byte{
		0x91, 0x22, 0x33, 0x44, 0x55, 0x66, 0x77, 0x88, // local id, MPSC bit set
		0x01, 0x02, 0x03, 0x04, 0x05, 0x06, 0x07, 0x08, // routing session id
		0x00, 0x01, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x0a, // schema 1, Message, header 0, payload 10
		0x81, 0xa4, 'I', 't', 'e', 'm', 0xc4, 0x02, 'h', 'i',
		0x00, 0x01, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x09,
		0xa8, 'D', 'e', 't', 'a', 'c', 'h', 'e', 'd',
	}
	select {
	case b := <-got:
		if !bytes.Equal(b, want) {
			t.Fatalf("connection bytes\n got % x\nwant % x", b, want)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the producer did not close the connection after Detach")
	}
}

// TestRemoteMPSCOwnerWireGolden: the owner, driven by hand-written bytes
// as a producer of the reference would send them: the attach answer's
// exact JSON, then a connection whose frames the consumer reads tagged
// with the SenderID that the answer gave.
func TestRemoteMPSCOwnerWireGolden(t *testing.T) {
	consumer := newRemoteNode(t)
	raw := newMessenger(t)
	connect(t, raw, consumer.msg)
	an := newMPSC(t, consumer.sm)
	h := an.Handle()
	body := fmt.Appendf(nil, `{"handle":{"hi":%d,"lo":%d},"session_id":3,"stream_cancel_handle":{"hi":4,"lo":5}}`, h.Hi, h.Lo)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	answer, err := raw.Unary(ctx, consumer.msg.InstanceID(), wire.MPSCAnchorAttachHandler, body)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := wire.DecodeMPSCAttachResponse(answer)
	if err != nil || resp.RoutingSessionID == 0 {
		t.Fatalf("answer %s: %+v, %v", answer, resp, err)
	}
	want := fmt.Sprintf(`{"Ok":{"streaming_transport_key":"tcp-stream","heartbeat_interval_ms":5000,"sender_id":1,"routing_session_id":%d,"initial_credit":0,"slot_byte_budget":0}}`, resp.RoutingSessionID)
	if string(answer) != want {
		t.Fatalf("answer\n got %s\nwant %s", answer, want)
	}
	c, err := net.Dial("tcp", consumer.sm.streamAddr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	b := wire.TCPPreamble{AnchorID: h.LocalID(), SessionID: resp.RoutingSessionID}.Append(nil)
	b = append(b, 0x00, 0x01, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x09,
		0x81, 0xa4, 'I', 't', 'e', 'm', 0xc4, 0x01, 'a')
	b = append(b, 0x00, 0x01, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x0a,
		0xa9, 'F', 'i', 'n', 'a', 'l', 'i', 'z', 'e', 'd') // read as Detached
	if _, err := c.Write(b); err != nil {
		t.Fatal(err)
	}
	if f := nextFrameWithin(t, an, 5*time.Second); f.Kind != MPSCItem || f.Sender != 1 || string(f.Item) != "a" {
		t.Fatalf("%+v, want item a of SenderID(1)", f)
	}
	if f := nextFrameWithin(t, an, 5*time.Second); f.Kind != MPSCDetached || f.Sender != 1 {
		t.Fatalf("%+v, want Detached of SenderID(1): a producer cannot finalize", f)
	}
	if got := an.Senders(); got != 0 {
		t.Fatalf("Senders = %d, want 0", got)
	}
}

// TestRemoteMPSCNeverConnects: a producer that attaches and never
// connects is counted, then dropped after three heartbeat windows (the
// reference's reader watches heartbeats from the attach), and the stream
// goes on.
func TestRemoteMPSCNeverConnects(t *testing.T) {
	producer, consumer := hbNodes(t, nil)
	an := newMPSC(t, consumer.sm)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := msgrx.Handshake(producer.msg, ctx, consumer.msg.InstanceID()); err != nil {
		t.Fatal(err)
	}
	req := wire.AttachRequest{Handle: an.Handle(), SessionID: 1, CancelHandle: wire.NewCancelHandle(producer.msg.WorkerID(), 1)}
	start := time.Now()
	body, err := producer.msg.Unary(ctx, consumer.msg.InstanceID(), wire.MPSCAnchorAttachHandler, req.AppendJSON(nil))
	if err != nil {
		t.Fatal(err)
	}
	resp, err := wire.DecodeMPSCAttachResponse(body)
	if err != nil || resp.Refused || resp.SenderID != 1 {
		t.Fatalf("attach answer %+v, %v", resp, err)
	}
	if got := an.Senders(); got != 1 {
		t.Fatalf("Senders = %d, want 1 (counted at the answer)", got)
	}
	f := nextFrameWithin(t, an, 5*time.Second)
	took := time.Since(start)
	if f.Kind != MPSCDropped || f.Sender != 1 {
		t.Fatalf("%+v, want Dropped of SenderID(1)", f)
	}
	if lo, hi := detectionMultiplier*testWindow, detectionMultiplier*testWindow+watchdogSlack; took < lo || took > hi {
		t.Fatalf("dropped %v after the attach, want within [%v, %v]", took, lo, hi)
	}
	if got := an.Senders(); got != 0 {
		t.Fatalf("Senders = %d, want 0", got)
	}
}

// TestRemoteMPSCDialFailsReleases: the attach is answered but the
// producer cannot reach the owner's stream listener. The producer tells
// the owner (_mpsc_anchor_detach), so the consumer reads that producer's
// Detached at once, not after the owner's connect window (15 s here).
func TestRemoteMPSCDialFailsReleases(t *testing.T) {
	producer, consumer := newRemoteNode(t), newRemoteNode(t)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	dead := ln.Addr().(*net.TCPAddr)
	ln.Close() // nothing listens there now: the dial is refused
	info := consumer.msg.PeerInfo()
	addr := make(ext.WorkerAddress, len(info.Address)+1) // a copy: the messenger's own stays
	for k, v := range info.Address {
		addr[k] = v
	}
	info.Address = addr
	info.Address[wire.TCPStreamKey] = tcp.EncodeEndpoint([]tcp.Interface{{IP: "127.0.0.1", Port: uint16(dead.Port), PrefixLen: 32}})
	if err := producer.msg.RegisterPeer(info); err != nil {
		t.Fatal(err)
	}
	an := newMPSC(t, consumer.sm)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	start := time.Now()
	if _, err := AttachMPSCAnchor[[]byte](ctx, producer.sm, an.Handle()); err == nil || !strings.Contains(err.Error(), "dial") {
		t.Fatalf("attach = %v, want the dial's error", err)
	}
	f := nextFrameWithin(t, an, 5*time.Second)
	if f.Kind != MPSCDetached || f.Sender != 1 {
		t.Fatalf("%+v, want Detached of SenderID(1)", f)
	}
	if took := time.Since(start); took > 2*time.Second {
		t.Fatalf("released %v after the attach, want well within the 15 s connect window", took)
	}
	if got := an.Senders(); got != 0 {
		t.Fatalf("Senders = %d, want 0", got)
	}
}

// TestRemoteMPSCHeartbeatKeepsIdleProducer: a remote producer that sends
// nothing for several heartbeat windows is kept alive by its node's
// heartbeats, and its next item arrives.
func TestRemoteMPSCHeartbeatKeepsIdleProducer(t *testing.T) {
	producer, consumer := hbNodes(t, nil)
	an := newMPSC(t, consumer.sm)
	s := attachMPSCRemoteT(t, producer, an.Handle())
	// Twice the detection time with nothing but heartbeats: the consumer
	// must see nothing at all (no Dropped).
	ctx, cancel := context.WithTimeout(context.Background(), 2*detectionMultiplier*testWindow)
	f, err := an.Next(ctx)
	cancel()
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Next while the producer idles = %+v, %v; want the wait's own deadline", f, err)
	}
	if err := s.Send(context.Background(), []byte("late")); err != nil {
		t.Fatal(err)
	}
	if f := nextFrameWithin(t, an, 5*time.Second); f.Kind != MPSCItem || string(f.Item) != "late" {
		t.Fatalf("%+v, want the late item", f)
	}
	if n := producer.sm.remote.tcp.Heartbeats(); n == 0 {
		t.Fatal("no heartbeat was sent")
	}
}

// TestRemoteMPSCStop: a consumer's RequestStop reaches producers on other
// nodes (one attached before the stop, one after, which finds it kept);
// each answers with a final item and detaches, and the stream goes on
// until the consumer ends it.
func TestRemoteMPSCStop(t *testing.T) {
	consumer, p1, p2 := newRemoteNode(t), newRemoteNode(t), newRemoteNode(t)
	knows(t, consumer, p1, p2)
	an := newMPSC(t, consumer.sm)
	early := attachMPSCRemoteT(t, p1, an.Handle())
	an.Controller().RequestStop()
	late := attachMPSCRemoteT(t, p2, an.Handle())
	for _, s := range []*MPSCSender[[]byte]{early, late} {
		select {
		case <-s.Stopped():
		case <-time.After(5 * time.Second):
			t.Fatalf("producer %v never saw the stop", s.SenderID())
		}
		select {
		case <-s.Cancelled():
			t.Fatal("a stop cancelled the producer")
		default:
		}
		if err := s.Send(context.Background(), []byte("last")); err != nil {
			t.Fatal(err)
		}
		if err := s.Detach(); err != nil {
			t.Fatal(err)
		}
	}
	items, detached := 0, 0
	for detached < 2 {
		f := nextFrameWithin(t, an, 5*time.Second)
		switch f.Kind {
		case MPSCItem:
			items++
		case MPSCDetached:
			detached++
		default:
			t.Fatalf("unexpected frame %v (%v)", f.Kind, f.Err)
		}
	}
	if items != 2 {
		t.Fatalf("%d final items, want 2", items)
	}
}

// TestRemoteMPSCCancelSendsStreamCancel: the consumer's cancel sends each
// remote producer of an MPSC anchor _stream_cancel with the stream id of
// its attach request, the body the reference's cancel_all_senders sends. A
// Rust producer's cancellation token fires only on that message (seen in
// the live interop run); the closed connection alone left it unfired.
func TestRemoteMPSCCancelSendsStreamCancel(t *testing.T) {
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
	an := newMPSC(t, consumer.sm)
	h := an.Handle()
	body := fmt.Appendf(nil, `{"handle":{"hi":%d,"lo":%d},"session_id":5,"stream_cancel_handle":{"hi":%d,"lo":5}}`, h.Hi, h.Lo, uint64(raw.WorkerID()))
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	answer, err := raw.Unary(ctx, consumer.msg.InstanceID(), wire.MPSCAnchorAttachHandler, body)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := wire.DecodeMPSCAttachResponse(answer)
	if err != nil || resp.Refused {
		t.Fatalf("answer %s: %v", answer, err)
	}
	c, err := net.Dial("tcp", consumer.sm.streamAddr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	b := wire.TCPPreamble{AnchorID: h.LocalID(), SessionID: resp.RoutingSessionID}.Append(nil)
	b = wire.AppendTCPFrame(b, wire.AppendBytesItem(nil, []byte("a")))
	if _, err := c.Write(b); err != nil {
		t.Fatal(err)
	}
	if f := nextFrameWithin(t, an, 5*time.Second); f.Kind != MPSCItem {
		t.Fatalf("%+v, want the item", f)
	}
	an.Controller().Cancel()
	select {
	case p := <-got:
		if want := `{"sender_stream_id":5}`; string(p) != want {
			t.Fatalf("_stream_cancel body %s, want %s", p, want)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("no _stream_cancel reached the producer's node")
	}
}

// _mpsc_anchor_detach names a producer by its SenderID, a counter that
// every producer of the anchor could guess: only the worker that attached
// that producer may detach it. Another producer's worker is ignored and
// counted.
func TestRemoteMPSCDetachOnlyByItsProducer(t *testing.T) {
	producer, consumer := twoNodes(t)
	other := newRemoteNode(t)
	if err := other.msg.RegisterPeer(consumer.msg.PeerInfo()); err != nil {
		t.Fatal(err)
	}
	an := newMPSC(t, consumer.sm)
	s1 := attachMPSCRemoteT(t, producer, an.Handle())
	attachMPSCRemoteT(t, other, an.Handle()) // holds the handle too
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	dr := wire.MPSCDetachRequest{Handle: an.Handle(), SenderID: uint64(s1.SenderID())}
	if _, err := other.msg.Unary(ctx, consumer.msg.InstanceID(), wire.MPSCAnchorDetachHandler, dr.AppendJSON(nil)); err != nil {
		t.Fatal(err)
	}
	if n := consumer.sm.remote.tcp.StrangerSignals(); n != 1 {
		t.Fatalf("stranger signals %d, want 1", n)
	}
	if err := s1.Send(ctx, []byte("still here")); err != nil {
		t.Fatal(err)
	}
	if f := nextFrameWithin(t, an, 5*time.Second); f.Kind != MPSCItem || f.Sender != s1.SenderID() {
		t.Fatalf("%+v, want an item of %v", f, s1.SenderID())
	}
	if _, err := producer.msg.Unary(ctx, consumer.msg.InstanceID(), wire.MPSCAnchorDetachHandler, dr.AppendJSON(nil)); err != nil {
		t.Fatal(err)
	}
	if f := nextFrameWithin(t, an, 5*time.Second); f.Kind != MPSCDetached || f.Sender != s1.SenderID() {
		t.Fatalf("%+v, want Detached of %v", f, s1.SenderID())
	}
}
