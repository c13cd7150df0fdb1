package messenger

import (
	"bytes"
	"encoding/hex"
	"encoding/json"
	"errors"
	"strings"
	"testing"

	"github.com/velo-go/velo/ext"
)

// Golden vectors for the messenger's frames and bodies, written by hand
// from the Rust reference's formats (release 0.9, paths under
// lib/velo/src/ of ai-dynamo/velo). Each is checked both ways: encoding
// the value gives the bytes, decoding the bytes gives the value.

// goldenID is worker 0x0123456789abcdef, slot 0x0042, generation
// 0xa1b2c3d4e5f6: as a u128, 0xa1b2c3d4e5f60042_0123456789abcdef
// (messenger/common/responses.rs, encode_response_key: worker in bits 0-63,
// slot in 64-79, generation in 80-127).
var goldenID = ResponseID{Lo: 0x0123456789abcdef, Hi: 0xa1b2c3d4e5f6<<16 | 0x0042}

// goldenIDLE is goldenID as 16 little-endian bytes.
const goldenIDLE = "efcdab8967452301" + "4200f6e5d4c3b2a1"

func unhex(t *testing.T, s string) []byte {
	t.Helper()
	b, err := hex.DecodeString(strings.ReplaceAll(s, " ", ""))
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func TestGoldenResponseID(t *testing.T) {
	if goldenID.Worker() != 0x0123456789abcdef || goldenID.Slot() != 0x42 || goldenID.Generation() != 0xa1b2c3d4e5f6 {
		t.Fatalf("fields of %+v: worker %x slot %x gen %x", goldenID, goldenID.Worker(), goldenID.Slot(), goldenID.Generation())
	}
	if got := goldenID.AppendLE(nil); !bytes.Equal(got, unhex(t, goldenIDLE)) {
		t.Fatalf("encoded % x", got)
	}
	if got := readResponseID(unhex(t, goldenIDLE)); got != goldenID {
		t.Fatalf("decoded %+v", got)
	}
}

// messenger/common/messages.rs: [u8 schema=1][u8 response_type]
// [u128 LE response_id][u16 LE name_len][name][u16 LE headers_len][headers].
func TestGoldenRequestHeader(t *testing.T) {
	want := unhex(t, "01 02"+goldenIDLE+"0400 70696e67 0500 81a16ba176")
	hb, err := EncodeHeaders(map[string]string{"k": "v"})
	if err != nil {
		t.Fatal(err)
	}
	if got := appendRequestHeader(nil, UnaryResponse, goldenID, "ping", hb); !bytes.Equal(got, want) {
		t.Fatalf("encoded\n% x\nwant\n% x", got, want)
	}
	h, err := parseRequestHeader(want)
	if err != nil || h.rtype != UnaryResponse || h.id != goldenID || string(h.handler) != "ping" || !bytes.Equal(h.headers, hb) {
		t.Fatalf("decoded %+v, %v", h, err)
	}
}

// messenger/common/responses.rs, encode_response_header:
// [u128 LE response_id][u8 outcome][u16 LE headers_len][MessagePack map].
func TestGoldenResponseHeader(t *testing.T) {
	cases := []struct {
		name    string
		outcome byte
		headers []byte
		wire    string
	}{
		{"ok, no headers", outcomeOK, nil, goldenIDLE + "00 0000"},
		{"error, no headers", outcomeErr, nil, goldenIDLE + "01 0000"},
		{"ok, one header", outcomeOK, []byte{0x81, 0xa1, 'k', 0xa1, 'v'}, goldenIDLE + "00 0500 81a16ba176"},
	}
	for _, c := range cases {
		want := unhex(t, c.wire)
		if got := appendResponseHeader(nil, goldenID, c.outcome, c.headers); !bytes.Equal(got, want) {
			t.Errorf("%s: encoded % x, want % x", c.name, got, want)
		}
		id, outcome, hb, err := parseResponseHeader(want)
		if err != nil || id != goldenID || outcome != c.outcome || !bytes.Equal(hb, c.headers) {
			t.Errorf("%s: decoded %+v %d % x %v", c.name, id, outcome, hb, err)
		}
	}
	valid := unhex(t, goldenIDLE+"00 0500 81a16ba176")
	for n := range len(valid) {
		if _, _, _, err := parseResponseHeader(valid[:n]); !errors.Is(err, ErrMalformedHeader) {
			t.Errorf("a header cut to %d bytes parsed", n)
		}
	}
	for name, b := range map[string][]byte{
		"outcome 2":        unhex(t, goldenIDLE+"02 0000"),
		"trailing byte":    append(unhex(t, goldenIDLE+"00 0000"), 0),
		"length too large": unhex(t, goldenIDLE+"00 0600 81a16ba176"),
	} {
		if _, _, _, err := parseResponseHeader(b); !errors.Is(err, ErrMalformedHeader) {
			t.Errorf("%s parsed", name)
		}
	}
}

// messenger/common/events.rs, encode_event_header: [u8 flags][u128 LE id];
// bit 0 Event (clear for an Ack), bit 1 error.
func TestGoldenAckHeader(t *testing.T) {
	for _, c := range []struct {
		failed bool
		wire   string
	}{{false, "00" + goldenIDLE}, {true, "02" + goldenIDLE}} {
		want := unhex(t, c.wire)
		if got := appendAckHeader(nil, goldenID, c.failed); !bytes.Equal(got, want) {
			t.Errorf("failed=%v: encoded % x, want % x", c.failed, got, want)
		}
		flags, id, err := parseAckHeader(want)
		if err != nil || id != goldenID || (flags&ackFlagError != 0) != c.failed || flags&ackFlagEvent != 0 {
			t.Errorf("failed=%v: decoded %#x %+v %v", c.failed, flags, id, err)
		}
	}
	// An Event frame's header has the same shape with bit 0 set.
	if flags, _, err := parseAckHeader(unhex(t, "03"+goldenIDLE)); err != nil || flags != ackFlagEvent|ackFlagError {
		t.Errorf("event header: %#x %v", flags, err)
	}
	for name, b := range map[string][]byte{
		"unknown flag bit": unhex(t, "04"+goldenIDLE),
		"16 bytes":         unhex(t, "00"+goldenIDLE)[:16],
		"18 bytes":         append(unhex(t, "00"+goldenIDLE), 0),
	} {
		if _, _, err := parseAckHeader(b); !errors.Is(err, ErrMalformedHeader) {
			t.Errorf("%s parsed", name)
		}
	}
}

// messenger/server/system_handlers.rs: HelloRequest {peer_info} and
// HandlersResponse {handlers}; velo-ext's PeerInfo in serde_json's form.
func TestGoldenHelloBodies(t *testing.T) {
	id, err := ext.ParseInstanceID("0a1b2c3d-4e5f-4a6b-8c7d-8e9fa0b1c2d3")
	if err != nil {
		t.Fatal(err)
	}
	info := ext.PeerInfo{InstanceID: id, Address: ext.WorkerAddress{"uds": []byte("/s")}}
	// The address is {"uds": [0x2f, 0x73]}: 81 a3 'u' 'd' 's' 92 2f 73.
	want := `{"peer_info":{"instance_id":"0a1b2c3d-4e5f-4a6b-8c7d-8e9fa0b1c2d3","worker_address":[129,163,117,100,115,146,47,115]}}`
	got, err := json.Marshal(helloRequest{PeerInfo: &info})
	if err != nil || string(got) != want {
		t.Fatalf("hello request\n%s\nwant\n%s (%v)", got, want, err)
	}
	var back helloRequest
	if err := json.Unmarshal([]byte(want), &back); err != nil || back.PeerInfo.InstanceID != id || string(back.PeerInfo.Address["uds"]) != "/s" {
		t.Fatalf("decoded %+v, %v", back.PeerInfo, err)
	}
	resp := `{"handlers":["_hello","_list_handlers","echo"]}`
	if got, _ := json.Marshal(handlersResponse{Handlers: []string{"_hello", "_list_handlers", "echo"}}); string(got) != resp {
		t.Fatalf("handlers response %s", got)
	}
	var hr handlersResponse
	if err := json.Unmarshal([]byte(resp), &hr); err != nil || len(hr.Handlers) != 3 || hr.Handlers[2] != "echo" {
		t.Fatalf("decoded %+v, %v", hr, err)
	}
}
