package messenger_test

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"testing"
	"time"

	"github.com/velo-go/velo/ext"
	"github.com/velo-go/velo/internal/frame"
	"github.com/velo-go/velo/messenger"
	"github.com/velo-go/velo/transport/tcp"
)

// TestRepliesOnTheWire: a bare socket plays a caller and reads the frames
// a node sends back, byte for byte, in the reference's layouts: a unary
// answer is a Response with the 19-byte header, a sync answer an Ack (or a
// Nack with the error text), and a request for a missing handler an error
// Response whose header map carries the code 12 (Unimplemented) and the
// reason "unknown_handler", whatever the pattern (the reference answers with a Nack, which carries no code; a
// Rust caller reads either frame as the same failure).
func TestRepliesOnTheWire(t *testing.T) {
	server := newNode(t)
	must(t, server.Register(messenger.UnaryHandler("echo", func(c *messenger.Context) ([]byte, error) {
		return append([]byte(nil), c.Payload...), nil
	})))
	must(t, server.Register(messenger.SyncHandler("check", func(c *messenger.Context) error {
		if len(c.Payload) == 0 {
			return errors.New("empty")
		}
		return nil
	})))

	// The fake caller: a listener the server dials to answer, registered
	// with the server as a peer.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	must(t, err)
	t.Cleanup(func() { ln.Close() })
	caller := ext.NewInstanceID()
	ap := ln.Addr().(*net.TCPAddr)
	ep := tcp.EncodeEndpoint([]tcp.Interface{{IP: "127.0.0.1", Port: uint16(ap.Port), PrefixLen: 32}})
	must(t, server.RegisterPeer(ext.PeerInfo{InstanceID: caller, Address: ext.WorkerAddress{tcp.Key: ep}}))
	out := rawConn(t, server)

	var replies net.Conn
	accepted := make(chan net.Conn, 1)
	go func() {
		c, err := ln.Accept()
		if err == nil {
			accepted <- c
		}
	}()
	token := uint64(0xa1b2c3d4e5f6)<<16 | 7
	idLE := binary.LittleEndian.AppendUint64(nil, uint64(caller.WorkerID()))
	idLE = binary.LittleEndian.AppendUint64(idLE, token)

	// A node serves user handlers only to callers that greeted it: before
	// the handshake, the request is refused with the code of
	// ErrPeerRestarted (the caller greeted some earlier instance, if any).
	early := wireRequestHeader(2, uint64(caller.WorkerID()), token, "echo", nil)
	_, err = out.Write(frame.Append(nil, ext.Frame{Type: ext.Message, Header: early, Payload: []byte("hi")}))
	must(t, err)
	replies = recv(t, accepted, "the server to dial the caller")
	t.Cleanup(func() { replies.Close() })
	if typ, h, _ := readFrame(t, replies); typ != ext.Response || !bytes.Equal(h, codedHeader(idLE, "14", "peer_restarted")) {
		t.Fatalf("a request before the handshake was answered with type %d header % x, want the peer_restarted code", typ, h)
	}

	body, err := json.Marshal(map[string]any{"peer_info": ext.PeerInfo{InstanceID: caller, Address: ext.WorkerAddress{tcp.Key: ep}}})
	must(t, err)
	hello := wireRequestHeader(2, uint64(caller.WorkerID()), token, "_hello", nil)
	_, err = out.Write(frame.Append(nil, ext.Frame{Type: ext.Message, Header: hello, Payload: body}))
	must(t, err)
	if typ, _, p := readFrame(t, replies); typ != ext.Response || !bytes.Contains(p, []byte(`"handlers"`)) {
		t.Fatalf("hello answered with type %d: %s", typ, p)
	}

	cases := []struct {
		rt      byte
		handler string
		payload string
		typ     ext.MessageType
		header  []byte
		answer  string
	}{
		{2, "echo", "hi", ext.Response, append(append([]byte(nil), idLE...), 0, 0, 0), "hi"},
		{1, "check", "x", ext.Ack, append([]byte{0}, idLE...), ""},
		{1, "check", "", ext.Ack, append([]byte{2}, idLE...), "empty"},
		{2, "missing", "", ext.Response, codedHeader(idLE, "12", "unknown_handler"), `velo: no such handler: "missing"`},
		{1, "missing", "", ext.Response, codedHeader(idLE, "12", "unknown_handler"), `velo: no such handler: "missing"`},
	}
	for i, c := range cases {
		hdr := wireRequestHeader(c.rt, uint64(caller.WorkerID()), token, c.handler, nil)
		_, err := out.Write(frame.Append(nil, ext.Frame{Type: ext.Message, Header: hdr, Payload: []byte(c.payload)}))
		must(t, err)
		typ, h, p := readFrame(t, replies)
		if typ != c.typ || !bytes.Equal(h, c.header) || string(p) != c.answer {
			t.Errorf("case %d (%s to %q): got type %d header % x payload %q; want type %d header % x payload %q",
				i, fmt.Sprint(c.rt), c.handler, typ, h, p, c.typ, c.header, c.answer)
		}
	}
}

// codedHeader is an error Response header whose map is
// {"velo-code": code, "velo-reason": reason}, written out by hand.
func codedHeader(idLE []byte, code, reason string) []byte {
	m := append([]byte{0x82, 0xa0 | 9}, "velo-code"...)
	m = append(append(m, 0xa0|byte(len(code))), code...)
	m = append(append(m, 0xa0|11), "velo-reason"...)
	m = append(append(m, 0xa0|byte(len(reason))), reason...)
	h := append(append([]byte(nil), idLE...), 1)
	h = binary.LittleEndian.AppendUint16(h, uint16(len(m)))
	return append(h, m...)
}

// readFrame reads one frame: the 11-byte preamble, then header and payload.
func readFrame(t *testing.T, c net.Conn) (ext.MessageType, []byte, []byte) {
	t.Helper()
	c.SetReadDeadline(time.Now().Add(failAfter))
	var pre [11]byte
	if _, err := io.ReadFull(c, pre[:]); err != nil {
		t.Fatalf("read preamble: %v", err)
	}
	if v := binary.BigEndian.Uint16(pre[:]); v != 1 {
		t.Fatalf("schema version %d", v)
	}
	h := make([]byte, binary.BigEndian.Uint32(pre[3:]))
	p := make([]byte, binary.BigEndian.Uint32(pre[7:]))
	if _, err := io.ReadFull(c, h); err != nil {
		t.Fatal(err)
	}
	if _, err := io.ReadFull(c, p); err != nil {
		t.Fatal(err)
	}
	return ext.MessageType(pre[2]), h, p
}

// TestCodedReplyOnTheWire: the error Response of a handler that returned
// an *Error, byte for byte: the code alone in the header map (the reason
// only for a sentinel), the message as the payload, for a unary and a
// sync call alike. A Rust caller reads the payload as it reads a Nack's.
func TestCodedReplyOnTheWire(t *testing.T) {
	server := newNode(t)
	must(t, server.Register(messenger.UnaryHandler("find", func(c *messenger.Context) ([]byte, error) {
		return nil, messenger.Errorf(messenger.NotFound, "no user %s", c.Payload)
	})))
	must(t, server.Register(messenger.SyncHandler("spend", func(c *messenger.Context) error {
		return messenger.NewSentinel(1001, "test_quota", "quota used up")
	})))
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	must(t, err)
	t.Cleanup(func() { ln.Close() })
	caller := ext.NewInstanceID()
	ap := ln.Addr().(*net.TCPAddr)
	ep := tcp.EncodeEndpoint([]tcp.Interface{{IP: "127.0.0.1", Port: uint16(ap.Port), PrefixLen: 32}})
	must(t, server.RegisterPeer(ext.PeerInfo{InstanceID: caller, Address: ext.WorkerAddress{tcp.Key: ep}}))
	out := rawConn(t, server)
	accepted := make(chan net.Conn, 1)
	go func() {
		c, err := ln.Accept()
		if err == nil {
			accepted <- c
		}
	}()
	token := uint64(0x55)<<16 | 3
	idLE := binary.LittleEndian.AppendUint64(nil, uint64(caller.WorkerID()))
	idLE = binary.LittleEndian.AppendUint64(idLE, token)
	body, err := json.Marshal(map[string]any{"peer_info": ext.PeerInfo{InstanceID: caller, Address: ext.WorkerAddress{tcp.Key: ep}}})
	must(t, err)
	_, err = out.Write(frame.Append(nil, ext.Frame{Type: ext.Message, Header: wireRequestHeader(2, uint64(caller.WorkerID()), token, "_hello", nil), Payload: body}))
	must(t, err)
	replies := recv(t, accepted, "the server to dial the caller")
	t.Cleanup(func() { replies.Close() })
	if typ, _, _ := readFrame(t, replies); typ != ext.Response {
		t.Fatalf("hello answered with type %d", typ)
	}

	// {"velo-code": "5"}
	codeOnly := append([]byte{0x81, 0xa9}, "velo-code"...)
	codeOnly = append(codeOnly, 0xa1, '5')
	find := append(append(append([]byte(nil), idLE...), 1), byte(len(codeOnly)), 0)
	find = append(find, codeOnly...)
	for _, c := range []struct {
		rt      byte
		handler string
		header  []byte
		answer  string
	}{
		{2, "find", find, "no user 7"},
		{1, "spend", codedHeader(idLE, "1001", "test_quota"), "quota used up"},
	} {
		_, err := out.Write(frame.Append(nil, ext.Frame{Type: ext.Message, Header: wireRequestHeader(c.rt, uint64(caller.WorkerID()), token, c.handler, nil), Payload: []byte("7")}))
		must(t, err)
		typ, h, p := readFrame(t, replies)
		if typ != ext.Response || !bytes.Equal(h, c.header) || string(p) != c.answer {
			t.Errorf("%s: got type %d header % x payload %q; want an error Response, header % x, payload %q", c.handler, typ, h, p, c.header, c.answer)
		}
	}
}
