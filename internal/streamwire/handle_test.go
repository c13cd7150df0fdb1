package streamwire

import (
	"bytes"
	"encoding/json"
	"errors"
	"testing"

	"github.com/velo-go/velo/ext"
)

// Golden handles, written by hand from the reference's StreamAnchorHandle
// (lib/velo/src/streaming/handle.rs): u128 = worker << 64 | local, the
// MPSC kind in bit 63 of local, serialized through the struct
// StreamAnchorHandleWire {hi: u64, lo: u64}. rmp_serde::to_vec writes a
// struct as an array of its fields; serde_json as an object.
var goldenHandles = []struct {
	name string
	h    AnchorHandle
	mp   string // rmp_serde::to_vec
	json string // serde_json
}{
	{"small", AnchorHandle{1, 2}, "92 01 02", `{"hi":1,"lo":2}`},
	// handle.rs test_pack_unpack_roundtrip: worker 0xDEAD_BEEF_1234_5678, local 42.
	{"reference test", AnchorHandle{0xdeadbeef12345678, 42}, "92 cf deadbeef12345678 2a",
		`{"hi":16045690981402826360,"lo":42}`},
	{"integer widths", AnchorHandle{200, 300}, "92 cc c8 cd 012c", `{"hi":200,"lo":300}`},
	{"u32", AnchorHandle{70000, 127}, "92 ce 00011170 7f", `{"hi":70000,"lo":127}`},
	// test_max_mpsc_values_roundtrip: worker u64::MAX, local (1<<63)-1 | MPSC bit.
	{"max mpsc", AnchorHandle{0xffffffffffffffff, 0xffffffffffffffff},
		"92 cf ffffffffffffffff cf ffffffffffffffff",
		`{"hi":18446744073709551615,"lo":18446744073709551615}`},
	{"zero", AnchorHandle{}, "92 00 00", `{"hi":0,"lo":0}`},
}

func TestGoldenAnchorHandle(t *testing.T) {
	for _, g := range goldenHandles {
		if got := g.h.AppendMsgpack(nil); !bytes.Equal(got, unhex(t, g.mp)) {
			t.Errorf("%s: msgpack % x, want %s", g.name, got, g.mp)
		}
		if h, err := DecodeAnchorHandleMsgpack(unhex(t, g.mp)); err != nil || h != g.h {
			t.Errorf("%s: decode msgpack %+v, %v", g.name, h, err)
		}
		if got := g.h.AppendJSON(nil); string(got) != g.json {
			t.Errorf("%s: json %s, want %s", g.name, got, g.json)
		}
		var h AnchorHandle
		if err := json.Unmarshal([]byte(g.json), &h); err != nil || h != g.h {
			t.Errorf("%s: decode json %+v, %v", g.name, h, err)
		}
		// The cancel handle has the same encoding.
		c := CancelHandle(g.h)
		if got := c.AppendMsgpack(nil); !bytes.Equal(got, unhex(t, g.mp)) {
			t.Errorf("%s: cancel msgpack % x", g.name, got)
		}
		if back, err := DecodeCancelHandleMsgpack(unhex(t, g.mp)); err != nil || back != c {
			t.Errorf("%s: cancel decode %+v, %v", g.name, back, err)
		}
		if got, _ := json.Marshal(c); string(got) != g.json {
			t.Errorf("%s: cancel json %s", g.name, got)
		}
	}
}

func TestAnchorHandleLayout(t *testing.T) {
	h := NewAnchorHandle(0xdeadbeef12345678, 42)
	if h.Owner() != 0xdeadbeef12345678 || h.LocalID() != 42 || h.IsMPSC() {
		t.Errorf("%+v", h)
	}
	if got := h.String(); got != "StreamAnchorHandle(worker=16045690981402826360, local=42, kind=spsc)" {
		t.Errorf("String = %s", got)
	}
	m := NewMPSCAnchorHandle(1, 7)
	if m != (AnchorHandle{1, 1<<63 | 7}) || !m.IsMPSC() || m.LocalID() != 1<<63|7 {
		t.Errorf("%+v", m)
	}
	if got := m.String(); got != "StreamAnchorHandle(worker=1, local=7, kind=mpsc)" {
		t.Errorf("String = %s", got)
	}
	c := NewCancelHandle(ext.WorkerID(4), 5)
	if c != (CancelHandle{4, 5}) || c.Producer() != 4 || c.StreamID() != 5 {
		t.Errorf("%+v", c)
	}
}

// What rmp_serde would read besides the array: the named form that
// rmp_serde::to_vec_named writes, and signed integers that are not
// negative.
func TestDecodeHandleMsgpackOtherForms(t *testing.T) {
	for hexs, want := range map[string]AnchorHandle{
		"82 a2 6869 01 a2 6c6f 02": {1, 2},
		"82 a2 6c6f 02 a2 6869 01": {1, 2},
		"92 d0 05 d1 0006":         {5, 6},
	} {
		if h, err := DecodeAnchorHandleMsgpack(unhex(t, hexs)); err != nil || h != want {
			t.Errorf("%s: %+v, %v", hexs, h, err)
		}
	}
}

func TestDecodeHandleMsgpackRefuses(t *testing.T) {
	for _, s := range []string{
		"", "90", "91 01", "93 01 02 03", "92 01", "92 01 02 03",
		"92 ff 01",                               // negative
		"92 d0 ff 01",                            // negative int8
		"92 c0 01",                               // nil
		"c4 10 00000000000000000000000000000001", // a raw u128 as bin 16
		"82 a2 6869 01 a2 6869 02",               // hi twice
		"82 a2 6869 01 a2 7878 02",               // unknown field
		"92 cf 0102",                             // cut
	} {
		if h, err := DecodeAnchorHandleMsgpack(unhex(t, s)); !errors.Is(err, ErrMalformed) {
			t.Errorf("%s: %+v, %v", s, h, err)
		}
	}
}

func TestDecodeHandleJSONRefuses(t *testing.T) {
	for _, s := range []string{
		``, `null`, `[1,2]`, `{"hi":1}`, `{"lo":1}`, `{"hi":1,"lo":-1}`, `{"hi":1,"lo":1.0}`,
		`{"hi":1,"lo":1e3}`, `{"hi":1,"lo":"2"}`, `{"hi":1,"lo":18446744073709551616}`,
		`{"HI":1,"lo":2}`, `{"hi":1,"hi":1,"lo":2}`, `{"hi":1,"lo":2} x`, `{"hi":1,"lo":2}{}`,
		`{"hi":1,"lo":null}`,
	} {
		var h AnchorHandle
		if err := h.UnmarshalJSON([]byte(s)); !errors.Is(err, ErrMalformed) {
			t.Errorf("%s: %+v, %v", s, h, err)
		}
	}
	// Unknown fields are skipped and whitespace is allowed, as serde_json does.
	var h AnchorHandle
	if err := h.UnmarshalJSON([]byte(" { \"lo\" : 2 , \"x\":[1], \"hi\":1 } ")); err != nil || h != (AnchorHandle{1, 2}) {
		t.Errorf("%+v, %v", h, err)
	}
}
