package streamwire

import (
	"bytes"
	"errors"
	"testing"
)

// The per-stream TCP connection (lib/velo/src/streaming/tcp_transport.rs):
// the 16-byte handshake [anchor_id u64 BE][session_id u64 BE], then
// messenger frames (transports/tcp/framing.rs, TcpFrameCodec) of type
// Message (0) with an empty header, the stream frame as payload
// (EgressFrame: msg_type Message, header &[]).
func TestGoldenTCPPreamble(t *testing.T) {
	p := TCPPreamble{AnchorID: 1<<63 | 0x0102030405060708, SessionID: 9}
	const want = "8102030405060708 0000000000000009"
	if got := p.Append(nil); !bytes.Equal(got, unhex(t, want)) {
		t.Errorf("% x", got)
	}
	back, err := DecodeTCPPreamble(append(unhex(t, want), 0xaa))
	if err != nil || back != p {
		t.Errorf("%+v, %v", back, err)
	}
	if _, err := DecodeTCPPreamble(unhex(t, want)[:15]); !errors.Is(err, ErrMalformed) {
		t.Errorf("short preamble: %v", err)
	}
}

func TestGoldenTCPFrame(t *testing.T) {
	// Finalized: preamble 0001 00 00000000 0000000a, then a9 "Finalized".
	const fin = "0001 00 00000000 0000000a a9 46696e616c697a6564"
	// Item(42u32): 7 bytes.
	const item = "0001 00 00000000 00000007 81 a4 4974656d 2a"
	if got := AppendTCPFrame(nil, []byte(FinalizedFrame)); !bytes.Equal(got, unhex(t, fin)) {
		t.Errorf("Finalized: % x", got)
	}
	stream := append(unhex(t, item), unhex(t, fin)...)
	p, n, err := DecodeTCPFrame(stream, MaxTCPFrame)
	if err != nil || n != 18 || !bytes.Equal(p, unhex(t, "81a44974656d2a")) {
		t.Fatalf("first: % x, %d, %v", p, n, err)
	}
	p, n2, err := DecodeTCPFrame(stream[n:], MaxTCPFrame)
	if err != nil || n2 != 21 || string(p) != FinalizedFrame || !IsTerminalFrame(p) {
		t.Fatalf("second: % x, %d, %v", p, n2, err)
	}
	// A cut frame asks for more.
	for i := range len(stream[:n]) {
		if p, n, err := DecodeTCPFrame(stream[:i], MaxTCPFrame); p != nil || n != 0 || err != nil {
			t.Errorf("%d bytes: % x, %d, %v", i, p, n, err)
		}
	}
}

func TestDecodeTCPFrameRefuses(t *testing.T) {
	for _, s := range []string{
		"0002 00 00000000 00000000",       // schema 2
		"0001 07 00000000 00000000",       // unknown type
		"0001 01 00000000 00000001 c0",    // Response
		"0001 00 00000001 00000001 00 c0", // a header
		"0001 00 00000000 01000001",       // over 16 MiB, nothing behind it
		"0001 00 ffffffff ffffffff",
	} {
		if p, n, err := DecodeTCPFrame(unhex(t, s), MaxTCPFrame); !errors.Is(err, ErrMalformed) || n != 0 || p != nil {
			t.Errorf("%s: % x, %d, %v", s, p, n, err)
		}
	}
	if err := CheckTCPFrameSize(make([]byte, MaxTCPFrame+1)); err == nil {
		t.Error("oversized frame passed")
	}
	if err := CheckTCPFrameSize(make([]byte, MaxTCPFrame)); err != nil {
		t.Error(err)
	}
}
