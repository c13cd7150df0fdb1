package messenger_test

import (
	"encoding/binary"
	"errors"
	"io"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/velo-go/velo"
	"github.com/velo-go/velo/ext"
	"github.com/velo-go/velo/internal/frame"
	"github.com/velo-go/velo/messenger"
	"github.com/velo-go/velo/transport/tcp"
)

// wireRequestHeader encodes an active-message header by hand, as the design
// page states it, so these tests also pin the wire format:
//
//	[u8 schema=1][u8 response_type][u128 LE response_id]
//	[u16 LE name_len][name][u16 LE headers_len][headers]
func wireRequestHeader(rt byte, lo, hi uint64, name string, headers []byte) []byte {
	b := []byte{1, rt}
	b = binary.LittleEndian.AppendUint64(b, lo)
	b = binary.LittleEndian.AppendUint64(b, hi)
	b = binary.LittleEndian.AppendUint16(b, uint16(len(name)))
	b = append(b, name...)
	b = binary.LittleEndian.AppendUint16(b, uint16(len(headers)))
	return append(b, headers...)
}

// rawConn dials a node's TCP endpoint as a bare socket.
func rawConn(t *testing.T, n *velo.Node) net.Conn {
	t.Helper()
	ep, err := n.PeerInfo().Address.Lookup(tcp.Key)
	must(t, err)
	addr, err := tcp.DialAddr(ep)
	must(t, err)
	conn, err := net.Dial("tcp", addr)
	must(t, err)
	t.Cleanup(func() { conn.Close() })
	return conn
}

// proveAs binds a raw connection to node n at the node conn is connected
// to: it writes a request in n's name, catches the identity challenge that
// n receives for the connection, and writes the proof on conn itself, as n
// would on its own connection.
func proveAs(t *testing.T, conn net.Conn, n *velo.Node) {
	t.Helper()
	bodies := make(chan []byte, 1)
	n.Messenger().OnChallenge(func(b []byte) {
		select {
		case bodies <- b:
		default:
		}
	})
	w := uint64(n.WorkerID())
	_, err := conn.Write(frame.Append(nil, ext.Frame{Type: ext.Message, Header: wireRequestHeader(0, w, 0, "_list_handlers", nil)}))
	must(t, err)
	body := recv(t, bodies, "the identity challenge")
	_, err = conn.Write(frame.Append(nil, ext.Frame{Type: ext.Message, Header: wireRequestHeader(0, w, 0, "_velo_proof", nil), Payload: body}))
	must(t, err)
}

// TestMalformedHeaderIsCountedAndDropped: well-formed frames that carry a
// bad messenger header are counted and dropped. The connection stays up,
// the node keeps serving, and nothing panics.
func TestMalformedHeaderIsCountedAndDropped(t *testing.T) {
	sm := newMetrics(t)
	a, b := pair(t, nil, []velo.Option{velo.WithMetrics(sm)})
	ctx := testCtx(t)
	probed := make(chan error, 4)
	must(t, b.Register(velo.FireHandler("probe", func(c *velo.Context) {
		_, err := c.Headers()
		probed <- err
	})))
	must(t, b.Register(velo.UnaryHandler("echo", func(c *velo.Context) ([]byte, error) { return c.Payload, nil })))
	// A node serves user handlers only to callers that greeted it: the
	// raw frames below speak as a, after a's handshake.
	_, err := a.RemoteHandlers(ctx, b.InstanceID())
	must(t, err)
	w := uint64(a.WorkerID())

	valid := wireRequestHeader(0, w, 0, "probe", nil)
	garbage := [][]byte{
		nil,                                // empty
		[]byte("garbage!"),                 // short
		valid[:len(valid)-1],               // truncated before the headers length
		append([]byte{2}, valid[1:]...),    // schema 2
		append([]byte{1, 3}, valid[2:]...), // response type 3
		wireRequestHeader(0, w, 1, strings.Repeat("n", 1025), nil),   // name over 1 KiB
		append(wireRequestHeader(0, w, 1, "probe", []byte{0x80}), 0), // trailing byte
		wireRequestHeader(0, w, 1, "probe", make([]byte, messenger.MaxEncodedHeaders+1)),
		func() []byte { // a name length past the end
			h := wireRequestHeader(0, w, 1, "probe", nil)
			binary.LittleEndian.PutUint16(h[18:], 60000)
			return h
		}(),
	}
	conn := rawConn(t, b)
	proveAs(t, conn, a)
	var out []byte
	for _, h := range garbage {
		out = frame.Append(out, ext.Frame{Type: ext.Message, Header: h, Payload: []byte("x")})
	}
	// Then a valid request on the same connection: the reader handles frames
	// in order, so once the probe runs every bad frame has been counted.
	out = frame.Append(out, ext.Frame{Type: ext.Message, Header: valid})
	_, err = conn.Write(out)
	must(t, err)
	must(t, recv(t, probed, "the probe after the garbage"))
	malformed := sm.DispatchFailures.WithLabelValues("decode", "malformed_header")
	if n := testutil.ToFloat64(malformed); n != float64(len(garbage)) {
		t.Fatalf("malformed_header = %v, want %d", n, len(garbage))
	}

	// User headers are decoded when the handler asks: a bad map reaches the
	// handler as an error from Headers, not as a dropped request.
	_, err = conn.Write(frame.Append(nil, ext.Frame{Type: ext.Message, Header: wireRequestHeader(0, w, 1, "probe", []byte{0xc1})}))
	must(t, err)
	if err := recv(t, probed, "the probe with bad headers"); !errors.Is(err, messenger.ErrMalformedHeader) {
		t.Fatalf("Headers() of a bad map: %v", err)
	}

	// Replies that are not ours are counted and dropped too.
	var replies []byte
	response := func(outcome byte, worker, token uint64) []byte { // responses.rs layout
		h := binary.LittleEndian.AppendUint64(nil, worker)
		h = binary.LittleEndian.AppendUint64(h, token)
		return append(h, outcome, 0, 0)
	}
	ack := func(flags byte, worker, token uint64) []byte { // events.rs layout
		h := binary.LittleEndian.AppendUint64([]byte{flags}, worker)
		return binary.LittleEndian.AppendUint64(h, token)
	}
	for _, f := range []ext.Frame{
		{Type: ext.Response, Header: []byte("junk")},
		{Type: ext.Ack, Header: ack(7, uint64(b.WorkerID()), 1<<16)},              // undefined flag bit
		{Type: ext.Response, Header: response(2, uint64(b.WorkerID()), 1<<16)},    // bad outcome
		{Type: ext.Response, Header: response(0, uint64(a.WorkerID()), 1<<16)},    // someone else's caller
		{Type: ext.Response, Header: response(0, uint64(b.WorkerID()), 1<<40|77)}, // no such call
		{Type: ext.ShuttingDown, Header: []byte("junk")},
	} {
		replies = frame.Append(replies, f)
	}
	replies = frame.Append(replies, ext.Frame{Type: ext.Message, Header: valid})
	_, err = conn.Write(replies)
	must(t, err)
	must(t, recv(t, probed, "the probe after the bad replies"))
	for label, want := range map[string]float64{"malformed": 3, "misrouted": 1, "late_or_unknown": 1} {
		if n := testutil.ToFloat64(sm.DispatchFailures.WithLabelValues("response", label)); n != want {
			t.Fatalf("%s = %v, want %v", label, n, want)
		}
	}

	// Other callers are served as before.
	got, err := a.Unary(ctx, b.InstanceID(), "echo", []byte("still here"))
	must(t, err)
	if string(got) != "still here" {
		t.Fatalf("got %q", got)
	}
}

// TestMalformedFrameClosesOnlyItsConnection: a bad preamble closes that
// socket; the node and its other connections go on.
func TestMalformedFrameClosesOnlyItsConnection(t *testing.T) {
	a, b := pair(t, nil, nil)
	ctx := testCtx(t)
	must(t, b.Register(velo.UnaryHandler("echo", func(c *velo.Context) ([]byte, error) { return c.Payload, nil })))
	_, err := a.Unary(ctx, b.InstanceID(), "echo", nil)
	must(t, err)
	for name, pre := range map[string][]byte{
		"schema 9":     {0, 9, 0, 0, 0, 0, 0, 0, 0, 0, 0},
		"frame type 9": {0, 1, 9, 0, 0, 0, 0, 0, 0, 0, 0},
		"4 GiB header": {0, 1, 0, 0xff, 0xff, 0xff, 0xff, 0, 0, 0, 0},
	} {
		conn := rawConn(t, b)
		_, err := conn.Write(pre)
		must(t, err)
		conn.SetReadDeadline(time.Now().Add(failAfter))
		if n, err := conn.Read(make([]byte, 1)); err != io.EOF && !errors.Is(err, net.ErrClosed) && !isReset(err) {
			t.Fatalf("%s: the node kept the connection (read %d, %v)", name, n, err)
		}
		got, err := a.Unary(ctx, b.InstanceID(), "echo", []byte(name))
		must(t, err)
		if string(got) != name {
			t.Fatalf("got %q", got)
		}
	}
}

func isReset(err error) bool {
	return err != nil && strings.Contains(err.Error(), "connection reset")
}
