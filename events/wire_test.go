package events

// These tests pin the event system's wire forms to the reference
// implementation:
//
//   - lib/velo/src/events/handle.rs: EventHandle(u128) is
//     [system_id: 64 bits][local_index: 32 bits][generation: 32 bits],
//     most significant first;
//   - lib/velo/src/messenger/events/messages.rs: EventSubscribeMessage,
//     EventCompletionMessage and EventTriggerRequestMessage, written by
//     serde_json: fields in declaration order, no spaces, u128 and u64 as
//     plain JSON numbers with every digit, Option None as null, InstanceId
//     (a transparent Uuid) as the hyphenated lower-case UUID string.
//
// The numbers and JSON texts below are written by hand; do not regenerate
// them from the code under test.

import (
	"bytes"
	"encoding/json"
	"errors"
	"math/bits"
	"reflect"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/velo-go/velo/ext"
	"github.com/velo-go/velo/internal/msgwire"
)

// wireInstance is 6ba7b810-9dad-41d1-80b4-00c04fd430c8.
var wireInstance = ext.InstanceID{
	0x6b, 0xa7, 0xb8, 0x10, 0x9d, 0xad, 0x41, 0xd1,
	0x80, 0xb4, 0x00, 0xc0, 0x4f, 0xd4, 0x30, 0xc8,
}

const wireInstanceText = `"6ba7b810-9dad-41d1-80b4-00c04fd430c8"`

// wireHandle is makeHandle(0x0102030405060708, 5, 7): as a u128
// 0x0102030405060708_00000005_00000007.
var wireHandle = Handle{Hi: 0x0102030405060708, Lo: 0x0000000500000007}

const wireHandleDecimal = "1339673755198158348393236086208331783"

func wireStr(s string) *string { return &s }

func TestHandleLayoutMatchesReference(t *testing.T) {
	cases := []struct {
		owner    ext.WorkerID
		idx, gen uint32
		want     Handle
		decimal  string
	}{
		{0x0102030405060708, 5, 7, wireHandle, wireHandleDecimal},
		{0, 0, 0, Handle{}, "0"},
		{0, 0, 1, Handle{Lo: 1}, "1"},
		{0, 1, 0, Handle{Lo: 1 << 32}, "4294967296"},
		{1, 0, 0, Handle{Hi: 1}, "18446744073709551616"},
		// The top bit of the index is the reference's LOCAL_FLAG (bit 63).
		{0x0102030405060708, 0x80000001, 0xfffffffe, Handle{Hi: 0x0102030405060708, Lo: 0x80000001fffffffe}, "1339673755198158357616608110178205694"},
		{0xffffffffffffffff, 0xffffffff, 0xffffffff, Handle{Hi: 0xffffffffffffffff, Lo: 0xffffffffffffffff}, "340282366920938463463374607431768211455"},
	}
	for _, c := range cases {
		h := makeHandle(c.owner, c.idx, c.gen)
		if h != c.want {
			t.Errorf("makeHandle(%#x, %#x, %#x) = {%#x %#x}, want {%#x %#x}", c.owner, c.idx, c.gen, h.Hi, h.Lo, c.want.Hi, c.want.Lo)
		}
		if h.Owner() != c.owner || h.index() != c.idx || h.gen() != c.gen {
			t.Errorf("%v: owner %#x index %#x gen %#x, want %#x %#x %#x", h, h.Owner(), h.index(), h.gen(), c.owner, c.idx, c.gen)
		}
		u := handleU128(h)
		if got := u.String(); got != c.decimal {
			t.Errorf("%v as u128 = %s, want %s", h, got, c.decimal)
		}
		if got, err := u.MarshalJSON(); err != nil || string(got) != c.decimal {
			t.Errorf("%v MarshalJSON = %s, %v; want %s", h, got, err, c.decimal)
		}
		var back u128
		if err := back.UnmarshalJSON([]byte(c.decimal)); err != nil || back.handle() != h {
			t.Errorf("UnmarshalJSON(%s) = {%#x %#x}, %v; want %v", c.decimal, back.hi, back.lo, err, h)
		}
	}
}

func TestResponseIDAsU128(t *testing.T) {
	id := msgwire.ResponseID{Hi: 1, Lo: 1}
	u := responseU128(id)
	if got := u.String(); got != "18446744073709551617" {
		t.Errorf("ResponseID{Hi:1,Lo:1} as u128 = %s, want 18446744073709551617", got)
	}
	if u.responseID() != id {
		t.Errorf("responseID() = %+v, want %+v", u.responseID(), id)
	}
}

// wireMessages are the three bodies, each as a value and as the exact text
// serde_json writes for the same Rust value.
var wireMessages = []struct {
	name string
	text string
	val  any // a pointer to the value
}{
	{"subscribe",
		`{"handle":1339673755198158348393236086208331783,"subscriber_worker":18446744073709551615,"subscriber_instance":"6ba7b810-9dad-41d1-80b4-00c04fd430c8"}`,
		&subscribeMsg{Handle: handleU128(wireHandle), SubscriberWorker: 0xffffffffffffffff, SubscriberInstance: wireInstance}},
	{"subscribe, small numbers",
		`{"handle":0,"subscriber_worker":0,"subscriber_instance":"6ba7b810-9dad-41d1-80b4-00c04fd430c8"}`,
		&subscribeMsg{SubscriberInstance: wireInstance}},
	{"completion",
		`{"handle":1339673755198158348393236086208331783,"poisoned":null}`,
		&completionMsg{Handle: handleU128(wireHandle)}},
	{"completion, poisoned",
		`{"handle":1339673755198158348393236086208331783,"poisoned":"owner shut down"}`,
		&completionMsg{Handle: handleU128(wireHandle), Poisoned: wireStr("owner shut down")}},
	{"completion, poisoned with escapes",
		`{"handle":1339673755198158348393236086208331783,"poisoned":"disk \"full\"\n\tpath C:\\x \u0001 \b \f"}`,
		&completionMsg{Handle: handleU128(wireHandle), Poisoned: wireStr("disk \"full\"\n\tpath C:\\x \x01 \b \f")}},
	{"completion, poisoned with an empty reason",
		`{"handle":1,"poisoned":""}`,
		&completionMsg{Handle: u128{0, 1}, Poisoned: wireStr("")}},
	{"completion, unknown (this implementation's addition)",
		`{"handle":1339673755198158348393236086208331783,"poisoned":null,"unknown":true}`,
		&completionMsg{Handle: handleU128(wireHandle), Unknown: true}},
	{"completion, subscription refused (this implementation's addition)",
		`{"handle":5,"poisoned":"velo: too many subscriptions to one owner's pending events","velo_refused":"subscription_limit"}`,
		&completionMsg{Handle: u128{0, 5}, Poisoned: wireStr("velo: too many subscriptions to one owner's pending events"), Refused: "subscription_limit"}},
	{"trigger request",
		`{"handle":1339673755198158348393236086208331783,"requester_worker":42,"requester_instance":"6ba7b810-9dad-41d1-80b4-00c04fd430c8","poisoned":null,"response_id":null}`,
		&triggerRequestMsg{Handle: handleU128(wireHandle), RequesterWorker: 42, RequesterInstance: wireInstance}},
	{"trigger request, poisoned, response id 2^64+1",
		`{"handle":1339673755198158348393236086208331783,"requester_worker":42,"requester_instance":"6ba7b810-9dad-41d1-80b4-00c04fd430c8","poisoned":"cancelled","response_id":18446744073709551617}`,
		&triggerRequestMsg{Handle: handleU128(wireHandle), RequesterWorker: 42, RequesterInstance: wireInstance,
			Poisoned: wireStr("cancelled"), ResponseID: &u128{1, 1}}},
	{"trigger request, response id 2^128-2, handle 2^128-1",
		`{"handle":340282366920938463463374607431768211455,"requester_worker":0,"requester_instance":"6ba7b810-9dad-41d1-80b4-00c04fd430c8","poisoned":null,"response_id":340282366920938463463374607431768211454}`,
		&triggerRequestMsg{Handle: u128{0xffffffffffffffff, 0xffffffffffffffff}, RequesterInstance: wireInstance,
			ResponseID: &u128{0xffffffffffffffff, 0xfffffffffffffffe}}},
	{"trigger request, response id 2^64",
		`{"handle":7,"requester_worker":9223372036854775808,"requester_instance":"6ba7b810-9dad-41d1-80b4-00c04fd430c8","poisoned":null,"response_id":18446744073709551616}`,
		&triggerRequestMsg{Handle: u128{0, 7}, RequesterWorker: 1 << 63, RequesterInstance: wireInstance,
			ResponseID: &u128{1, 0}}},
}

func TestWireMessagesEncode(t *testing.T) {
	for _, m := range wireMessages {
		got, err := json.Marshal(m.val)
		if err != nil {
			t.Errorf("%s: Marshal: %v", m.name, err)
			continue
		}
		if string(got) != m.text {
			t.Errorf("%s:\n got %s\nwant %s", m.name, got, m.text)
		}
		if mj := mustJSON(m.val); !bytes.Equal(mj, got) {
			t.Errorf("%s: mustJSON = %s, Marshal = %s", m.name, mj, got)
		}
	}
}

func TestWireMessagesDecode(t *testing.T) {
	for _, m := range wireMessages {
		got := reflect.New(reflect.TypeOf(m.val).Elem())
		if err := json.Unmarshal([]byte(m.text), got.Interface()); err != nil {
			t.Errorf("%s: Unmarshal: %v", m.name, err)
			continue
		}
		if !reflect.DeepEqual(got.Interface(), m.val) {
			t.Errorf("%s: Unmarshal = %+v, want %+v", m.name, got.Elem().Interface(), reflect.ValueOf(m.val).Elem().Interface())
		}
	}
}

// serde_json escapes only '"', '\\' and control characters; '<', '>', '&'
// and U+2028 go out as they are. encoding/json's HTML escaping would write
// \u003c, \u003e, \u0026 and \u2028 instead: both sides read either, but
// the bytes differ from the reference's.
func TestWireReasonEscapingMatchesSerde(t *testing.T) {
	m := completionMsg{Handle: u128{0, 5}, Poisoned: wireStr("a<b & c>d \u2028")}
	want := "{\"handle\":5,\"poisoned\":\"a<b & c>d \u2028\"}"
	if got := string(mustJSON(m)); got != want {
		t.Errorf("mustJSON = %q\nwant       %q", got, want)
	}
	var back completionMsg
	if err := json.Unmarshal([]byte(want), &back); err != nil || !reflect.DeepEqual(back, m) {
		t.Errorf("Unmarshal(%q) = %+v, %v", want, back, err)
	}
}

// The handle of a decoded message is the handle that was sent.
func TestWireHandleSurvivesMessages(t *testing.T) {
	var m completionMsg
	if err := json.Unmarshal([]byte(`{"handle":1339673755198158348393236086208331783,"poisoned":null}`), &m); err != nil {
		t.Fatal(err)
	}
	if h := m.Handle.handle(); h != wireHandle || h.index() != 5 || h.gen() != 7 || h.Owner() != 0x0102030405060708 {
		t.Fatalf("handle = %v", h)
	}
	var tr triggerRequestMsg
	text := `{"handle":0,"requester_worker":1,"requester_instance":` + wireInstanceText + `,"poisoned":null,"response_id":18446744073709551617}`
	if err := json.Unmarshal([]byte(text), &tr); err != nil {
		t.Fatal(err)
	}
	if tr.ResponseID == nil || tr.ResponseID.responseID() != (msgwire.ResponseID{Hi: 1, Lo: 1}) {
		t.Fatalf("response id = %+v", tr.ResponseID)
	}
}

// What a Rust peer sends and this implementation must read: Unknown absent
// means false; a field serde knows nothing of is ignored on both sides, as
// is the order of fields and white space; a missing Option is None.
func TestWireMessagesDecodeVariants(t *testing.T) {
	cases := []struct {
		name string
		text string
		want completionMsg
	}{
		{"unknown false", `{"handle":5,"poisoned":null,"unknown":false}`, completionMsg{Handle: u128{0, 5}}},
		{"reordered, spaced", "{ \"poisoned\" : \"x\" ,\n\t\"handle\" : 5 }", completionMsg{Handle: u128{0, 5}, Poisoned: wireStr("x")}},
		{"extra field", `{"handle":5,"poisoned":null,"extra":[1,{"a":2}]}`, completionMsg{Handle: u128{0, 5}}},
		{"poisoned missing", `{"handle":5}`, completionMsg{Handle: u128{0, 5}}},
		{"escaped reason", `{"handle":5,"poisoned":"\u0041\u00e9\ud83d\ude00"}`, completionMsg{Handle: u128{0, 5}, Poisoned: wireStr("Aé😀")}},
	}
	for _, c := range cases {
		var got completionMsg
		if err := json.Unmarshal([]byte(c.text), &got); err != nil {
			t.Errorf("%s: %v", c.name, err)
			continue
		}
		if !reflect.DeepEqual(got, c.want) {
			t.Errorf("%s: got %+v, want %+v", c.name, got, c.want)
		}
	}
	// Unknown is omitted when false, so a Rust peer sees exactly its own
	// two fields.
	if got := string(mustJSON(completionMsg{Handle: u128{0, 5}})); got != `{"handle":5,"poisoned":null}` {
		t.Errorf("completion without unknown = %s", got)
	}
	if got := string(mustJSON(completionMsg{Handle: u128{0, 5}, Unknown: true})); got != `{"handle":5,"poisoned":null,"unknown":true}` {
		t.Errorf("completion with unknown = %s", got)
	}
}

// Numbers serde_json refuses for a u128 (sign, fraction, exponent, string,
// null, out of range), and JSON that is no number at all.
func TestU128UnmarshalRefuses(t *testing.T) {
	bad := []string{
		"",
		"-1",
		"-0",
		"+1",
		"1.5",
		"1.0",
		"1e3",
		"1E3",
		`"123"`,
		`"0"`,
		"null",
		"true",
		"[1]",
		" 1",
		"1 ",
		"0x10",
		"１", // full-width digit one
		"340282366920938463463374607431768211456",  // 2^128
		"340282366920938463463374607431768211457",  // 2^128+1
		"999999999999999999999999999999999999999",  // 39 nines
		"1000000000000000000000000000000000000000", // 40 digits
		"0340282366920938463463374607431768211455", // 40 digits, 2^128-1 after a zero
		"0000000000000000000000000000000000000000", // 40 zeros
		strings.Repeat("1", 1000),
	}
	for _, in := range bad {
		u := u128{0xdead, 0xbeef}
		if err := u.UnmarshalJSON([]byte(in)); err == nil {
			t.Errorf("UnmarshalJSON(%q) accepted %s", in, u)
		} else if !errors.Is(err, ErrMalformedHandle) {
			t.Errorf("UnmarshalJSON(%q): error %v does not wrap ErrMalformedHandle", in, err)
		}
		// Inside a message, through encoding/json, the same number fails.
		// (White space around a JSON value is no part of it.)
		if strings.TrimSpace(in) != in {
			continue
		}
		for _, text := range []string{
			`{"handle":` + in + `,"poisoned":null}`,
			`{"handle":1,"requester_worker":1,"requester_instance":` + wireInstanceText + `,"poisoned":null,"response_id":` + in + `}`,
		} {
			var m triggerRequestMsg
			if in == "null" && strings.Contains(text, "response_id") {
				continue // response_id is an Option: null is None (below)
			}
			if err := json.Unmarshal([]byte(text), &m); err == nil {
				t.Errorf("json.Unmarshal(%s) accepted %+v", text, m)
			}
		}
	}
	// response_id null is None; handle null is an error, as in serde_json.
	var m triggerRequestMsg
	if err := json.Unmarshal([]byte(`{"handle":null,"requester_worker":1,"requester_instance":`+wireInstanceText+`,"poisoned":null,"response_id":null}`), &m); err == nil {
		t.Errorf("handle null accepted")
	}
}

func TestU128UnmarshalAccepts(t *testing.T) {
	cases := []struct {
		in     string
		hi, lo uint64
	}{
		{"0", 0, 0},
		{"1", 0, 1},
		{"18446744073709551615", 0, 0xffffffffffffffff},
		{"18446744073709551616", 1, 0},
		{"18446744073709551617", 1, 1},
		{"340282366920938463463374607431768211454", 0xffffffffffffffff, 0xfffffffffffffffe},
		{"340282366920938463463374607431768211455", 0xffffffffffffffff, 0xffffffffffffffff},
		{wireHandleDecimal, 0x0102030405060708, 0x0000000500000007},
		// UnmarshalJSON itself takes leading zeros up to 39 characters (as
		// a plain number they mean the same value). encoding/json never
		// passes them on: "007" is no JSON number (nor for serde_json).
		{"007", 0, 7},
		{"00", 0, 0},
		{"000000000000000000000000000000000000001", 0, 1},
		{"018446744073709551616", 1, 0},
	}
	for _, c := range cases {
		var u u128
		if err := u.UnmarshalJSON([]byte(c.in)); err != nil || u != (u128{c.hi, c.lo}) {
			t.Errorf("UnmarshalJSON(%s) = {%#x %#x}, %v; want {%#x %#x}", c.in, u.hi, u.lo, err, c.hi, c.lo)
		}
	}
	var m completionMsg
	if err := json.Unmarshal([]byte(`{"handle":007,"poisoned":null}`), &m); err == nil {
		t.Errorf("encoding/json accepted the handle 007: %+v", m)
	}
}

// wireParseU128 is the oracle for the fuzz target: digits only, 1 to 39 of
// them, value below 2^128; ok is false otherwise.
func wireParseU128(b []byte) (hi, lo uint64, ok bool) {
	if len(b) == 0 || len(b) > 39 {
		return 0, 0, false
	}
	for _, c := range b {
		if c < '0' || c > '9' {
			return 0, 0, false
		}
		// (hi, lo) = (hi, lo)*10 + digit, refusing overflow.
		h1, l1 := bits.Mul64(lo, 10)
		h2, h2lo := bits.Mul64(hi, 10)
		if h2 != 0 {
			return 0, 0, false
		}
		newHi, carry := bits.Add64(h2lo, h1, 0)
		if carry != 0 {
			return 0, 0, false
		}
		newLo, carry := bits.Add64(l1, uint64(c-'0'), 0)
		newHi, carry = bits.Add64(newHi, 0, carry)
		if carry != 0 {
			return 0, 0, false
		}
		hi, lo = newHi, newLo
	}
	return hi, lo, true
}

func FuzzU128JSON(f *testing.F) {
	for _, s := range []string{
		"0", "1", "007", wireHandleDecimal,
		"18446744073709551615", "18446744073709551616",
		"340282366920938463463374607431768211455", "340282366920938463463374607431768211456",
		"1000000000000000000000000000000000000000", "-1", "1.5", "1e3", `"5"`, "+1", "", "null", " 1",
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		var u u128
		err := u.UnmarshalJSON(b)
		hi, lo, ok := wireParseU128(b)
		if ok != (err == nil) {
			t.Fatalf("UnmarshalJSON(%q): err %v, want ok=%v", b, err, ok)
		}
		if err != nil {
			if !errors.Is(err, ErrMalformedHandle) {
				t.Fatalf("UnmarshalJSON(%q): error %v does not wrap ErrMalformedHandle", b, err)
			}
		} else {
			if u != (u128{hi, lo}) {
				t.Fatalf("UnmarshalJSON(%q) = {%#x %#x}, want {%#x %#x}", b, u.hi, u.lo, hi, lo)
			}
			canonical := strings.TrimLeft(string(b), "0")
			if canonical == "" {
				canonical = "0"
			}
			out, err := u.MarshalJSON()
			if err != nil || string(out) != canonical || u.String() != canonical {
				t.Fatalf("%q re-marshals as %s (%v), String %s; want %s", b, out, err, u, canonical)
			}
			var back u128
			if err := back.UnmarshalJSON(out); err != nil || back != u {
				t.Fatalf("%s does not round-trip: {%#x %#x}, %v", out, back.hi, back.lo, err)
			}
		}

		// Through encoding/json: it trims white space around the value and
		// takes only a JSON number, so whatever it accepts is canonical,
		// and every canonical number below 2^128 is accepted.
		lit := bytes.Trim(b, " \t\r\n")
		lhi, llo, lok := wireParseU128(lit)
		canonical := lok && (len(lit) == 1 || lit[0] != '0')
		var j u128
		jerr := json.Unmarshal(b, &j)
		if canonical != (jerr == nil) {
			t.Fatalf("json.Unmarshal(%q): err %v, want ok=%v", b, jerr, canonical)
		}
		if jerr == nil {
			if j != (u128{lhi, llo}) {
				t.Fatalf("json.Unmarshal(%q) = %s", b, j)
			}
			out, err := json.Marshal(j)
			if err != nil || !bytes.Equal(out, lit) {
				t.Fatalf("json.Marshal(%s) = %s, %v; want %s", j, out, err, lit)
			}
		}
	})
}

// FuzzMustJSONRoundTrip: the serde-style encoding (no HTML escapes, raw
// U+2028 and U+2029) of any valid UTF-8 reason decodes back to the same
// reason, whatever backslashes and escapes it holds.
func FuzzMustJSONRoundTrip(f *testing.F) {
	for _, s := range []string{"", "a<b & c>d \u2028", `\u2028`, `\\u2029`, "\\\u2029", "\n\t\"", "\x00\x1f\x7f"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, reason string) {
		if !utf8.ValidString(reason) {
			return
		}
		b := mustJSON(completionMsg{Handle: u128{1, 2}, Poisoned: &reason})
		var back completionMsg
		if err := json.Unmarshal(b, &back); err != nil {
			t.Fatalf("%s: %v", b, err)
		}
		if back.Poisoned == nil || *back.Poisoned != reason || back.Handle != (u128{1, 2}) {
			t.Fatalf("%q came back as %+v from %s", reason, back, b)
		}
	})
}

// FuzzEventBodies: the three event bodies come from any peer. Decoding
// never panics, and a body that decodes encodes (as this node writes it)
// to a body that decodes to the same value.
func FuzzEventBodies(f *testing.F) {
	for _, m := range wireMessages {
		f.Add([]byte(m.text))
	}
	for _, s := range []string{
		"", "{}", "null", "[]", `{"handle":-1}`, `{"handle":"5"}`, `{"handle":1e3}`,
		`{"handle":5,"poisoned":"\ud800"}`, `{"handle":5,"velo_refused":7}`,
		`{"subscriber_instance":"not-a-uuid"}`, `{"response_id":340282366920938463463374607431768211456}`,
		"{\"handle\":5,\"poisoned\":\"\xff\"}",
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		for _, newMsg := range []func() any{
			func() any { return new(subscribeMsg) },
			func() any { return new(completionMsg) },
			func() any { return new(triggerRequestMsg) },
		} {
			v := newMsg()
			if json.Unmarshal(b, v) != nil {
				continue
			}
			out := mustJSON(v)
			back := newMsg()
			if err := json.Unmarshal(out, back); err != nil {
				t.Fatalf("%T from %q re-encodes as %s, which does not decode: %v", v, b, out, err)
			}
			if !reflect.DeepEqual(v, back) {
				t.Fatalf("%T from %q: %+v, then %+v through %s", v, b, v, back, out)
			}
		}
	})
}
