package zmq_test

import (
	"bytes"
	"context"
	"encoding/hex"
	"errors"
	"net"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/go-zeromq/zmq4"
	"github.com/go-zeromq/zmq4/security/null"

	"github.com/velo-go/velo/ext"
	"github.com/velo-go/velo/transport/zmq"
)

var goldenID, _ = ext.ParseInstanceID("6f1c2a3b-4d5e-4f60-8172-8394a5b6c7d8")

type node struct {
	id      ext.InstanceID
	tr      *zmq.Transport
	adapter *ext.TransportAdapter
	state   *ext.ShutdownState
	info    ext.PeerInfo
}

func startNode(t testing.TB, id ext.InstanceID, opts ...zmq.Option) *node {
	t.Helper()
	tr, err := zmq.New(opts...)
	if err != nil {
		t.Fatal(err)
	}
	n := &node{id: id, tr: tr, state: ext.NewShutdownState()}
	n.adapter = ext.NewTransportAdapter(n.state, ext.AdapterConfig{})
	tr.BindInstance(id)
	ep, err := tr.Start(context.Background(), n.adapter)
	if err != nil {
		t.Fatal(err)
	}
	n.info = ext.PeerInfo{InstanceID: id, Address: ext.WorkerAddress{zmq.Key: ep}}
	t.Cleanup(func() {
		tr.Shutdown()
		<-tr.Closed()
		n.adapter.Close()
	})
	return n
}

func ctxT(t testing.TB) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// recorder keeps every byte read from a connection.
type recorder struct {
	net.Conn
	mu  sync.Mutex
	buf bytes.Buffer
}

func (r *recorder) Read(p []byte) (int, error) {
	n, err := r.Conn.Read(p)
	r.mu.Lock()
	r.buf.Write(p[:n])
	r.mu.Unlock()
	return n, err
}

func (r *recorder) bytes() []byte {
	r.mu.Lock()
	defer r.mu.Unlock()
	return bytes.Clone(r.buf.Bytes())
}

// zmtpPeer is a ROUTER end written against ZMTP itself: it accepts one
// connection, completes the handshake and hands back the raw connection
// with what was read so far.
func zmtpPeer(t *testing.T) (endpoint string, accepted <-chan *zmq4.Conn, rec <-chan *recorder) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	connc, recc := make(chan *zmq4.Conn, 1), make(chan *recorder, 1)
	go func() {
		c, err := ln.Accept()
		if err != nil {
			return
		}
		r := &recorder{Conn: c}
		zc, err := zmq4.Open(r, null.Security(), zmq4.Router, zmq4.SocketIdentity("golden-router"), true, nil)
		if err != nil {
			c.Close()
			return
		}
		recc <- r
		connc <- zc
	}()
	return "tcp://" + ln.Addr().String(), connc, recc
}

// TestFrameWireGolden pins what a DEALER lane puts on the wire for a
// frame: the ZMTP READY command names the sender's identity, the 16 bytes
// of its instance id, and the frame is three ZMTP message frames, the
// type byte (MORE), the header (MORE) and the payload, as the reference's
// sender writes them.
func TestFrameWireGolden(t *testing.T) {
	ep, connc, recc := zmtpPeer(t)
	tx := startNode(t, goldenID)
	target := ext.NewInstanceID()
	if err := tx.tr.Register(ext.PeerInfo{InstanceID: target, Address: ext.WorkerAddress{zmq.Key: []byte(ep)}}); err != nil {
		t.Fatal(err)
	}
	if _, err := tx.tr.Send(target, ext.Frame{Type: ext.Response, Header: []byte("hdr"), Payload: []byte("pl")}); err != nil {
		t.Fatal(err)
	}
	var zc *zmq4.Conn
	var rec *recorder
	select {
	case zc = <-connc:
		rec = <-recc
	case <-time.After(10 * time.Second):
		t.Fatal("the lane never connected")
	}
	defer zc.Close()
	handshake := len(rec.bytes())
	if got := zc.Peer.Meta["Identity"]; got != string(goldenID[:]) {
		t.Fatalf("identity %x, want the instance id %x", got, goldenID[:])
	}
	// READY's Identity property: name length, name, 4-byte value length, value.
	wantProp := append([]byte("\x08Identity\x00\x00\x00\x10"), goldenID[:]...)
	if !bytes.Contains(rec.bytes()[:handshake], wantProp) {
		t.Fatalf("READY does not carry the identity property %x", wantProp)
	}
	msg, err := zc.RecvMsg()
	if err != nil {
		t.Fatal(err)
	}
	if len(msg.Frames) != 3 || !bytes.Equal(msg.Frames[0], []byte{1}) || string(msg.Frames[1]) != "hdr" || string(msg.Frames[2]) != "pl" {
		t.Fatalf("parts %q, want [\\x01 hdr pl]", msg.Frames)
	}
	const golden = "010101" + "0103686472" + "0002706c"
	if got := hex.EncodeToString(rec.bytes()[handshake:]); got != golden {
		t.Fatalf("frame on the wire %s, want %s", got, golden)
	}
}

// TestAddressEntryGolden pins the "zmq" entry: the bound endpoint as
// UTF-8 bytes, with no terminator, under the key "zmq" of the shared
// WorkerAddress encoding (a MessagePack map whose values are byte arrays,
// each byte a positive fixint, as rmp-serde writes a Vec<u8>).
func TestAddressEntryGolden(t *testing.T) {
	a := ext.WorkerAddress{zmq.Key: []byte("tcp://127.0.0.1:5555")}
	const want = "81" + "a3" + "7a6d71" + "dc0014" + "7463703a2f2f3132372e302e302e313a35353535"
	if got := hex.EncodeToString(a.Encode()); got != want {
		t.Fatalf("address %s, want %s", got, want)
	}
	n := startNode(t, ext.NewInstanceID())
	ep := string(n.info.Address[zmq.Key])
	host, port, err := net.SplitHostPort(ep[len("tcp://"):])
	if ep[:6] != "tcp://" || err != nil || host != "127.0.0.1" || port == "0" {
		t.Fatalf("advertised %q, want tcp://127.0.0.1:<bound port>", ep)
	}
	for _, bad := range []string{"inproc://x", "udp://1.2.3.4:5", "tcp://", "\xff"} {
		err := n.tr.Register(ext.PeerInfo{InstanceID: ext.NewInstanceID(), Address: ext.WorkerAddress{zmq.Key: []byte(bad)}})
		if err == nil {
			t.Fatalf("registered a peer at %q", bad)
		}
	}
}

// A ROUTER that drains as the reference's does answers the DEALER's
// identity with [ShuttingDown, header, empty]; it reaches the Go sender's
// shutdown stream.
func TestReferenceStyleDrainEchoReachesGoSender(t *testing.T) {
	ep, connc, _ := zmtpPeer(t)
	tx := startNode(t, goldenID)
	target := ext.NewInstanceID()
	if err := tx.tr.Register(ext.PeerInfo{InstanceID: target, Address: ext.WorkerAddress{zmq.Key: []byte(ep)}}); err != nil {
		t.Fatal(err)
	}
	if _, err := tx.tr.Send(target, ext.Frame{Type: ext.Message, Header: []byte("request-header"), Payload: []byte("body")}); err != nil {
		t.Fatal(err)
	}
	zc := <-connc
	defer zc.Close()
	req, err := zc.RecvMsg()
	if err != nil || len(req.Frames) != 3 || req.Frames[0][0] != byte(ext.Message) {
		t.Fatalf("request %q, %v", req.Frames, err)
	}
	if err := zc.SendMsg(zmq4.NewMsgFrom([]byte{byte(ext.ShuttingDown)}, req.Frames[1], nil)); err != nil {
		t.Fatal(err)
	}
	echo, err := tx.adapter.Shutdowns().Pop(ctxT(t))
	if err != nil {
		t.Fatal(err)
	}
	if echo.Type != ext.ShuttingDown || string(echo.Header) != "request-header" || len(echo.Payload) != 0 {
		t.Fatalf("echo: type %v header %q payload %q", echo.Type, echo.Header, echo.Payload)
	}
}

// Multipart messages that are not [type, header, payload] are dropped and
// counted, and the connection they came on keeps working.
func TestMalformedMultipartDropped(t *testing.T) {
	rx := startNode(t, ext.NewInstanceID(), zmq.WithMaxFrameSize(64))
	d := zmq4.NewDealer(context.Background(), zmq4.WithID(zmq4.SocketIdentity("raw")))
	defer d.Close()
	if err := d.Dial(string(rx.info.Address[zmq.Key])); err != nil {
		t.Fatal(err)
	}
	bad := []zmq4.Msg{
		zmq4.NewMsgFrom([]byte{1}, []byte("h")),                        // two parts
		zmq4.NewMsgFrom([]byte{1}, []byte("h"), []byte("p"), []byte{}), // four parts
		zmq4.NewMsgFrom([]byte{1, 0}, []byte("h"), []byte("p")),        // two-byte type
		zmq4.NewMsgFrom([]byte{}, []byte("h"), []byte("p")),            // empty type
		zmq4.NewMsgFrom([]byte{9}, []byte("h"), []byte("p")),           // unknown type
		zmq4.NewMsgFrom([]byte{1}, []byte("h"), make([]byte, 64)),      // above the cap
	}
	for _, m := range bad {
		if err := d.SendMulti(m); err != nil {
			t.Fatal(err)
		}
	}
	if err := d.SendMulti(zmq4.NewMsgFrom([]byte{byte(ext.Response)}, []byte("good"), []byte("p"))); err != nil {
		t.Fatal(err)
	}
	f, err := rx.adapter.Responses().Pop(ctxT(t))
	if err != nil || string(f.Header) != "good" {
		t.Fatalf("good frame after the bad ones: %q, %v", f.Header, err)
	}
	if got := rx.tr.Stats().Malformed; got != uint64(len(bad)) {
		t.Fatalf("Malformed = %d, want %d", got, len(bad))
	}
}

// A peer that is not listening: the lane keeps dialling until the send
// timeout, then fails what it holds with ErrPeerUnreachable.
func TestUnreachablePeerFailsWithinSendTimeout(t *testing.T) {
	ln, _ := net.Listen("tcp", "127.0.0.1:0")
	ep := "tcp://" + ln.Addr().String()
	ln.Close() // nothing listens there now
	const timeout = 300 * time.Millisecond
	tx := startNode(t, ext.NewInstanceID(), zmq.WithSendTimeout(timeout), zmq.WithReconnectInterval(20*time.Millisecond))
	errs := make(chan error, 10)
	tx.adapter.SetSendErrorHandler(func(_ ext.InstanceID, _ ext.Frame, err error) { errs <- err })
	target := ext.NewInstanceID()
	if err := tx.tr.Register(ext.PeerInfo{InstanceID: target, Address: ext.WorkerAddress{zmq.Key: []byte(ep)}}); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	for i := 0; i < 3; i++ {
		if _, err := tx.tr.Send(target, ext.Frame{Type: ext.Message, Payload: []byte("x")}); err != nil {
			t.Fatal(err)
		}
	}
	for i := 0; i < 3; i++ {
		select {
		case err := <-errs:
			if !errors.Is(err, ext.ErrPeerUnreachable) {
				t.Fatalf("failure %d: %v, want ErrPeerUnreachable", i, err)
			}
		case <-time.After(10 * time.Second):
			t.Fatalf("frame %d never failed", i)
		}
	}
	if d := time.Since(start); d < timeout || d > 3*timeout+2*time.Second {
		t.Fatalf("failed after %v with a send timeout of %v", d, timeout)
	}
	if err := tx.tr.CheckHealth(context.Background(), target); !errors.Is(err, ext.ErrPeerUnreachable) {
		t.Fatalf("health of a peer that is not listening: %v", err)
	}
}

// A connection that stalls in its greeting holds up only itself: other
// peers connect and send meanwhile. (zmq4's own ROUTER socket opens
// connections one at a time, so one such peer would stop all others.)
func TestStalledGreetingHoldsUpNoOne(t *testing.T) {
	rx := startNode(t, ext.NewInstanceID())
	addr := string(rx.info.Address[zmq.Key])[len("tcp://"):]
	stalled, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer stalled.Close()
	stalled.Write([]byte{0xFF, 0, 0}) // the start of a greeting, then nothing
	tx := startNode(t, ext.NewInstanceID())
	if err := tx.tr.Register(rx.info); err != nil {
		t.Fatal(err)
	}
	if _, err := tx.tr.Send(rx.id, ext.Frame{Type: ext.Response, Header: []byte("h")}); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second) // under the 3 s handshake bound
	defer cancel()
	if _, err := rx.adapter.Responses().Pop(ctx); err != nil {
		t.Fatalf("a peer behind a stalled greeting: %v", err)
	}
	// Shutdown does not wait out the stalled handshake's bound.
	start := time.Now()
	rx.tr.Shutdown()
	if d := time.Since(start); d > time.Second {
		t.Fatalf("Shutdown took %v with a handshake stalled", d)
	}
}

// A peer that completes the handshake and then declares a frame far above
// the cap is cut off before anything is allocated for it.
func TestDeclaredHugeFrameClosesTheConnection(t *testing.T) {
	rx := startNode(t, ext.NewInstanceID(), zmq.WithMaxFrameSize(1<<20))
	raw, err := net.Dial("tcp", string(rx.info.Address[zmq.Key])[len("tcp://"):])
	if err != nil {
		t.Fatal(err)
	}
	defer raw.Close()
	if _, err := zmq4.Open(raw, null.Security(), zmq4.Dealer, zmq4.SocketIdentity("big"), false, nil); err != nil {
		t.Fatal(err)
	}
	// A long frame (flag 0x02) of 1 TiB.
	raw.Write([]byte{0x02, 0, 0, 1, 0, 0, 0, 0, 0})
	raw.SetReadDeadline(time.Now().Add(5 * time.Second))
	var one [1]byte
	if n, err := raw.Read(one[:]); n > 0 || err == nil || errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("the receiver kept the connection: %d, %v", n, err)
	}
}

// The return path is guarded too: a ROUTER we dial that declares a frame
// far above the cap is cut off (zmq4 alone would try to allocate it), and
// the next frame dials again.
func TestDealerRefusesDeclaredHugeFrame(t *testing.T) {
	ep, connc, recc := zmtpPeer(t)
	tx := startNode(t, ext.NewInstanceID(), zmq.WithMaxFrameSize(1<<20))
	target := ext.NewInstanceID()
	if err := tx.tr.Register(ext.PeerInfo{InstanceID: target, Address: ext.WorkerAddress{zmq.Key: []byte(ep)}}); err != nil {
		t.Fatal(err)
	}
	if _, err := tx.tr.Send(target, ext.Frame{Type: ext.Response, Header: []byte("h")}); err != nil {
		t.Fatal(err)
	}
	rec, zc := <-recc, <-connc
	defer zc.Close()
	if _, err := zc.RecvMsg(); err != nil {
		t.Fatal(err)
	}
	raw := rec.Conn
	raw.Write([]byte{0x02, 0, 0, 1, 0, 0, 0, 0, 0}) // a long frame of 1 TiB
	raw.SetReadDeadline(time.Now().Add(5 * time.Second))
	var one [1]byte
	if n, err := raw.Read(one[:]); n > 0 || err == nil || errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("the sender kept the connection: %d, %v", n, err)
	}
}
