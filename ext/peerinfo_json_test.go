package ext_test

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/velo-go/velo/ext"
)

const goldenPeerUUID = "0f1e2d3c-4b5a-4978-8695-a4b3c2d1e0f0"

// goldenPeerJSON is what the reference's serde_json writes for PeerInfo
// (lib/velo-ext/src/id/address.rs) with goldenPeerUUID and the address
// {"tcp": "127.0.0.1:5555"}: the address is its MessagePack encoding
//
//	81 a3 74 63 70 9e 31 32 37 2e 30 2e 30 2e 31 3a 35 35 35 35
//
// (see TestWorkerAddressEncodeExactBytes), written as decimal JSON numbers.
const goldenPeerJSON = `{"instance_id":"0f1e2d3c-4b5a-4978-8695-a4b3c2d1e0f0",` +
	`"worker_address":[129,163,116,99,112,158,49,50,55,46,48,46,48,46,49,58,53,53,53,53]}`

func goldenPeer(t testing.TB) ext.PeerInfo {
	t.Helper()
	id, err := ext.ParseInstanceID(goldenPeerUUID)
	if err != nil {
		t.Fatalf("ParseInstanceID(%q): %v", goldenPeerUUID, err)
	}
	want := ext.InstanceID{0x0f, 0x1e, 0x2d, 0x3c, 0x4b, 0x5a, 0x49, 0x78, 0x86, 0x95, 0xa4, 0xb3, 0xc2, 0xd1, 0xe0, 0xf0}
	if id != want {
		t.Fatalf("ParseInstanceID(%q) = % x, want % x", goldenPeerUUID, id[:], want[:])
	}
	return ext.PeerInfo{InstanceID: id, Address: ext.WorkerAddress{"tcp": []byte("127.0.0.1:5555")}}
}

func peerEqual(a, b ext.PeerInfo) bool {
	return a.InstanceID == b.InstanceID && addrEqual(a.Address, b.Address)
}

func describePeer(p ext.PeerInfo) string {
	return fmt.Sprintf("{%s %s}", p.InstanceID, describe(p.Address))
}

// peerJSON builds a PeerInfo document from raw JSON values.
func peerJSON(id, addr string) string {
	return `{"instance_id":` + id + `,"worker_address":` + addr + `}`
}

// jsonNumbers writes b as a JSON array of decimal numbers.
func jsonNumbers(b []byte) string {
	var sb strings.Builder
	sb.WriteByte('[')
	for i, c := range b {
		if i > 0 {
			sb.WriteByte(',')
		}
		fmt.Fprint(&sb, c)
	}
	sb.WriteByte(']')
	return sb.String()
}

func TestPeerInfoJSONGolden(t *testing.T) {
	p := goldenPeer(t)

	got, err := p.MarshalJSON()
	if err != nil {
		t.Fatalf("MarshalJSON: %v", err)
	}
	if string(got) != goldenPeerJSON {
		t.Fatalf("MarshalJSON =\n%s\nwant\n%s", got, goldenPeerJSON)
	}
	// Through encoding/json, by value and by pointer.
	for name, v := range map[string]any{"value": p, "pointer": &p} {
		got, err := json.Marshal(v)
		if err != nil {
			t.Fatalf("json.Marshal(%s): %v", name, err)
		}
		if string(got) != goldenPeerJSON {
			t.Fatalf("json.Marshal(%s) =\n%s\nwant\n%s", name, got, goldenPeerJSON)
		}
	}
	// Inside another document.
	nested, err := json.Marshal(struct {
		Peers []ext.PeerInfo `json:"peers"`
	}{[]ext.PeerInfo{p}})
	if err != nil {
		t.Fatalf("json.Marshal(nested): %v", err)
	}
	if want := `{"peers":[` + goldenPeerJSON + `]}`; string(nested) != want {
		t.Fatalf("nested =\n%s\nwant\n%s", nested, want)
	}

	var back ext.PeerInfo
	if err := json.Unmarshal([]byte(goldenPeerJSON), &back); err != nil {
		t.Fatalf("Unmarshal(golden): %v", err)
	}
	if !peerEqual(back, p) {
		t.Fatalf("Unmarshal(golden) = %s, want %s", describePeer(back), describePeer(p))
	}
}

// An empty address is still written: an empty map (0x80), never omitted or null.
func TestPeerInfoJSONEmptyAddress(t *testing.T) {
	id := goldenPeer(t).InstanceID
	want := peerJSON(`"`+goldenPeerUUID+`"`, `[128]`)
	for _, a := range []ext.WorkerAddress{nil, {}} {
		got, err := json.Marshal(ext.PeerInfo{InstanceID: id, Address: a})
		if err != nil || string(got) != want {
			t.Fatalf("Marshal(address %v) = %s, %v; want %s", a, got, err, want)
		}
	}
	var p ext.PeerInfo
	if err := json.Unmarshal([]byte(want), &p); err != nil {
		t.Fatalf("Unmarshal(%s): %v", want, err)
	}
	if p.InstanceID != id || p.Address == nil || len(p.Address) != 0 {
		t.Fatalf("Unmarshal(%s) = %s, want an empty non-nil address", want, describePeer(p))
	}
}

func TestPeerInfoJSONRoundTrip(t *testing.T) {
	addrs := []ext.WorkerAddress{
		nil,
		{"tcp": []byte("127.0.0.1:5555")},
		{"tcp": []byte("10.0.0.1:1"), "uds": []byte("/tmp/velo.sock"), "quic": []byte("[::1]:4433")},
		{"ucx": allBytes(), "": nil, "e": {}},
		{key(maxKeyLen, 'k'): pattern(maxEndpoint, 3), key(32, 'j'): pattern(16, 0x78)},
	}
	ids := []ext.InstanceID{{}, goldenPeer(t).InstanceID, ext.NewInstanceID(), ext.NewInstanceID()}
	for _, id := range ids {
		for _, a := range addrs {
			in := ext.PeerInfo{InstanceID: id, Address: a}
			raw, err := json.Marshal(in)
			if err != nil {
				t.Fatalf("Marshal(%s): %v", describePeer(in), err)
			}
			if want := peerJSON(`"`+id.String()+`"`, jsonNumbers(wantEncoding(a))); string(raw) != want {
				t.Fatalf("Marshal(%s) =\n%.200s\nwant\n%.200s", describePeer(in), raw, want)
			}
			var out ext.PeerInfo
			if err := json.Unmarshal(raw, &out); err != nil {
				t.Fatalf("Unmarshal(Marshal(%s)): %v", describePeer(in), err)
			}
			if !peerEqual(in, out) {
				t.Fatalf("round trip: %s became %s", describePeer(in), describePeer(out))
			}
		}
	}
}

// Layout the reference's serde_json reads too: whitespace, fields in the
// other order, and the old bin form of an endpoint inside the address.
func TestPeerInfoJSONUnmarshalAcceptsVariants(t *testing.T) {
	want := goldenPeer(t)
	enc := jsonNumbers(wantEncoding(want.Address))
	binForm := jsonNumbers(append([]byte{0x81, 0xa3, 't', 'c', 'p', 0xc4, 14}, "127.0.0.1:5555"...))
	for name, doc := range map[string]string{
		"whitespace":     "\n{ \"instance_id\" : \"" + goldenPeerUUID + "\" ,\t\"worker_address\" : [ " + enc[1:len(enc)-1] + " ] }\n",
		"reordered":      `{"worker_address":` + enc + `,"instance_id":"` + goldenPeerUUID + `"}`,
		"bin endpoint":   peerJSON(`"`+goldenPeerUUID+`"`, binForm),
		"escaped string": peerJSON(`"\u0030f1e2d3c-4b5a-4978-8695-a4b3c2d1e0f0"`, enc),
	} {
		var p ext.PeerInfo
		if err := json.Unmarshal([]byte(doc), &p); err != nil {
			t.Fatalf("%s: Unmarshal(%s): %v", name, doc, err)
		}
		if !peerEqual(p, want) {
			t.Fatalf("%s: Unmarshal = %s, want %s", name, describePeer(p), describePeer(want))
		}
	}
}

// worker_address may be a JSON string holding the encoded bytes themselves,
// as serde_bytes reads it (serde_json hands the string's raw bytes over).
// The encoding of any address starts with a byte of 0x80 or above, so the
// string holds bytes that are not UTF-8.
// A string worker_address is refused. serde_bytes reads a JSON string as
// its UTF-8 bytes, but an encoded address always starts with a byte that is
// not valid UTF-8 on its own (a map header), so no real address can take
// that form, and Go's JSON decoder would replace such bytes anyway.
func TestPeerInfoJSONUnmarshalStringAddress(t *testing.T) {
	enc := goldenPeer(t).Address.Encode()
	doc := []byte(`{"instance_id":"` + goldenPeerUUID + `","worker_address":"`)
	doc = append(doc, enc...)
	doc = append(doc, `"}`...)
	var p ext.PeerInfo
	if err := p.UnmarshalJSON(doc); err == nil {
		t.Fatalf("UnmarshalJSON(string address % x) = %s, want an error", enc, describePeer(p))
	}
}

// Strings that are not a valid address are refused like any other bad bytes.
func TestPeerInfoJSONUnmarshalStringAddressRefusals(t *testing.T) {
	id := `"` + goldenPeerUUID + `"`
	for name, addr := range map[string]string{
		"empty string":   `""`,
		"ascii":          `"tcp"`,
		"escaped utf-8":  `"\u0081\u00a3tcp\u0090"`, // c2 81 ... : 0xc2 is not a map
		"bad escape":     `"\x81"`,
		"unterminated":   `"abc`,
		"string of null": `"null"`,
	} {
		var p ext.PeerInfo
		if err := p.UnmarshalJSON([]byte(peerJSON(id, addr))); err == nil {
			t.Errorf("%s: UnmarshalJSON(%s) = %s, want an error", name, peerJSON(id, addr), describePeer(p))
		}
	}
}

func TestPeerInfoJSONUnmarshalRefusals(t *testing.T) {
	id := `"` + goldenPeerUUID + `"`
	addr := jsonNumbers(goldenPeer(t).Address.Encode())
	cases := map[string]string{
		// Missing or null fields.
		"missing worker_address": `{"instance_id":` + id + `}`,
		"missing instance_id":    `{"worker_address":` + addr + `}`,
		"empty object":           `{}`,
		"null worker_address":    peerJSON(id, `null`),
		"null instance_id":       peerJSON(`null`, addr),
		"misspelled field":       `{"instance_id":` + id + `,"worker_addr":` + addr + `}`,
		// Byte values out of range or not integers.
		"number 256":        peerJSON(id, `[129,163,116,99,112,145,256]`),
		"number 1000":       peerJSON(id, `[1000]`),
		"huge number":       peerJSON(id, `[18446744073709551616]`),
		"negative":          peerJSON(id, `[129,163,116,99,112,145,-1]`),
		"negative zero":     peerJSON(id, `[128,-0]`),
		"fraction":          peerJSON(id, `[129,163,116,99,112,145,1.5]`),
		"integral float":    peerJSON(id, `[128.0]`),
		"exponent":          peerJSON(id, `[1e2]`),
		"string element":    peerJSON(id, `[129,163,116,99,112,145,"1"]`),
		"bool element":      peerJSON(id, `[128,true]`),
		"null element":      peerJSON(id, `[128,null]`),
		"nested array":      peerJSON(id, `[[128]]`),
		"object element":    peerJSON(id, `[{}]`),
		"object address":    peerJSON(id, `{"tcp":[49]}`),
		"number address":    peerJSON(id, `128`),
		"bool address":      peerJSON(id, `true`),
		"base64 of address": peerJSON(id, `"gaN0Y3CeMTI3LjAuMC4xOjU1NTU="`),
		// Bad ids.
		"bad uuid hex":        peerJSON(`"zf1e2d3c-4b5a-4978-8695-a4b3c2d1e0f0"`, addr),
		"short uuid":          peerJSON(`"0f1e2d3c-4b5a-4978-8695-a4b3c2d1e0f"`, addr),
		"long uuid":           peerJSON(`"0f1e2d3c-4b5a-4978-8695-a4b3c2d1e0f00"`, addr),
		"uuid without dashes": peerJSON(`"0f1e2d3c4b5a49788695a4b3c2d1e0f0"`, addr),
		"uuid misplaced dash": peerJSON(`"0f1e2d3-c4b5a-4978-8695-a4b3c2d1e0f0"`, addr),
		"empty uuid":          peerJSON(`""`, addr),
		"number uuid":         peerJSON(`17`, addr),
		"array uuid":          peerJSON(`[15,30,45,60,75,90,73,120,134,149,164,179,194,209,224,240]`, addr),
		// Malformed address bytes.
		"empty address":           peerJSON(id, `[]`),
		"nil address":             peerJSON(id, `[192]`),
		"array top level":         peerJSON(id, `[145,163,116,99,112]`),
		"trailing byte":           peerJSON(id, `[128,0]`),
		"truncated":               peerJSON(id, `[129,163,116,99,112,158,49,50]`),
		"missing value":           peerJSON(id, `[129,163,116,99,112]`),
		"array of uint16":         peerJSON(id, `[129,163,116,99,112,145,205,0,1]`),
		"duplicate key":           peerJSON(id, `[130,161,107,144,161,107,144]`),
		"too many entries":        peerJSON(id, `[222,0,65]`),
		"huge bin32 length":       peerJSON(id, `[129,161,107,198,255,255,255,255]`),
		"endpoint 0xcc truncated": peerJSON(id, `[129,161,107,146,1,204]`),
		// Not a PeerInfo document.
		"not json":        `instance_id=` + goldenPeerUUID,
		"truncated json":  goldenPeerJSON[:len(goldenPeerJSON)-1],
		"trailing json":   goldenPeerJSON + `{}`,
		"array document":  `[` + goldenPeerJSON + `]`,
		"string document": `"` + goldenPeerUUID + `"`,
		"empty input":     ``,
	}
	addrErr := map[string]bool{}
	for name := range cases {
		switch name {
		case "empty address", "nil address", "array top level", "trailing byte", "truncated", "missing value",
			"array of uint16", "duplicate key", "too many entries", "huge bin32 length", "endpoint 0xcc truncated":
			addrErr[name] = true
		}
	}
	sentinel := goldenPeer(t)
	sentinel.Address = ext.WorkerAddress{"sentinel": []byte("unchanged")}
	for name, doc := range cases {
		for _, via := range []string{"UnmarshalJSON", "json.Unmarshal"} {
			p := sentinel
			var err error
			func() {
				defer func() {
					if r := recover(); r != nil {
						t.Fatalf("%s via %s: panic on %s: %v", name, via, doc, r)
					}
				}()
				if via == "UnmarshalJSON" {
					err = p.UnmarshalJSON([]byte(doc))
				} else {
					err = json.Unmarshal([]byte(doc), &p)
				}
			}()
			if err == nil {
				t.Errorf("%s via %s: accepted %s as %s", name, via, doc, describePeer(p))
				continue
			}
			if !peerEqual(p, sentinel) {
				t.Errorf("%s via %s: a refused document changed the value to %s (%v)", name, via, describePeer(p), err)
			}
			if addrErr[name] && !errors.Is(err, ext.ErrAddressMalformed) {
				t.Errorf("%s via %s: error %q does not wrap ErrAddressMalformed", name, via, err)
			}
		}
	}
}

// FuzzPeerInfoJSON checks that UnmarshalJSON never panics, and that whatever
// it accepts marshals to the canonical form, which reads back to an equal
// value and marshals to the same bytes again.
//
// Run: go test ./ext -run=^$ -fuzz=FuzzPeerInfoJSON -fuzztime=20s
func FuzzPeerInfoJSON(f *testing.F) {
	id := `"` + goldenPeerUUID + `"`
	enc := ext.WorkerAddress{"tcp": []byte("127.0.0.1:5555")}.Encode()
	seeds := []string{
		goldenPeerJSON,
		peerJSON(id, `[128]`),
		peerJSON(id, jsonNumbers(ext.WorkerAddress{"ucx": allBytes(), "uds": []byte("/s")}.Encode())),
		peerJSON(id, `"`+string(enc)+`"`),
		peerJSON(id, `"\u0081\u00a3tcp\u0090"`),
		`{"worker_address":[128],"instance_id":` + id + `}`,
		" {\"instance_id\" : " + id + ", \"worker_address\" : [ 128 ] } ",
		// Broken variants.
		`{"instance_id":` + id + `}`,
		`{"worker_address":[128]}`,
		`{}`,
		`null`,
		``,
		peerJSON(id, `[256]`),
		peerJSON(id, `[-1]`),
		peerJSON(id, `[1.5]`),
		peerJSON(id, `["a"]`),
		peerJSON(id, `[]`),
		peerJSON(id, `null`),
		peerJSON(id, `[129,163,116,99,112,158,49,50]`),
		peerJSON(id, `[130,161,107,144,161,107,144]`),
		peerJSON(id, `[129,161,107,221,64,0,0,0,1]`),
		peerJSON(`"zf1e2d3c-4b5a-4978-8695-a4b3c2d1e0f0"`, `[128]`),
		peerJSON(`17`, `[128]`),
		goldenPeerJSON[:40],
		goldenPeerJSON + `x`,
	}
	for _, s := range seeds {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		in := append([]byte(nil), data...)
		var p ext.PeerInfo
		err := p.UnmarshalJSON(data)
		if !bytes.Equal(in, data) {
			t.Fatal("UnmarshalJSON wrote to its input")
		}
		if err != nil {
			if !peerEqual(p, ext.PeerInfo{}) {
				t.Fatalf("error %q came with a value %s", err, describePeer(p))
			}
			return
		}
		if p.Address == nil {
			t.Fatalf("accepted %q with a nil address", data)
		}
		raw, err := json.Marshal(p)
		if err != nil {
			t.Fatalf("Marshal(%s): %v", describePeer(p), err)
		}
		if want := peerJSON(`"`+p.InstanceID.String()+`"`, jsonNumbers(wantEncoding(p.Address))); string(raw) != want {
			t.Fatalf("Marshal(%s) =\n%.300s\nwant\n%.300s", describePeer(p), raw, want)
		}
		var q ext.PeerInfo
		if err := json.Unmarshal(raw, &q); err != nil {
			t.Fatalf("Unmarshal(Marshal(%s)) = %v; marshalled %.300s", describePeer(p), err, raw)
		}
		if !peerEqual(p, q) {
			t.Fatalf("round trip changed the value: %s became %s", describePeer(p), describePeer(q))
		}
		again, err := json.Marshal(q)
		if err != nil || !bytes.Equal(again, raw) {
			t.Fatalf("Marshal is not stable:\n%.300s\n%.300s (%v)", raw, again, err)
		}
	})
}
