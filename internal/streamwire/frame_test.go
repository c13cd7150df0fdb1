package streamwire

import (
	"bytes"
	"errors"
	"strings"
	"testing"
)

// Golden stream frames, written by hand from the reference's StreamFrame<T>
// (lib/velo/src/streaming/frame.rs) as rmp_serde 1.3 writes it with
// rmp_serde::to_vec: a unit variant is its name as a string
// (serialize_unit_variant), a newtype variant a one-entry map from its name
// to its value (serialize_newtype_variant), strings and binaries in the
// smallest width (rmp 0.8 write_str_len, write_bin_len), integers in the
// smallest form (write_uint). Do not regenerate them from the code under
// test.
var goldenFrames = []struct {
	name string
	hex  string
	f    Frame
}{
	{"Dropped", "a7 44726f70706564", Frame{Kind: KindDropped}},
	{"Detached", "a8 4465746163686564", Frame{Kind: KindDetached}},
	{"Finalized", "a9 46696e616c697a6564", Frame{Kind: KindFinalized}},
	{"Heartbeat", "a9 486561727462656174", Frame{Kind: KindHeartbeat}},
	// StreamFrame::Item(42u32): a positive fixint.
	{"Item(42u32)", "81 a4 4974656d 2a", Frame{Kind: KindItem, Item: []byte{0x2a}}},
	// StreamFrame::<()>::Item(()): unit is nil.
	{"Item(())", "81 a4 4974656d c0", Frame{Kind: KindItem, Item: []byte{0xc0}}},
	// StreamFrame::Item(String::from("hello")).
	{"Item(String)", "81 a4 4974656d a5 68656c6c6f", Frame{Kind: KindItem, Item: unhex(nil, "a568656c6c6f")}},
	// StreamFrame::Item(Bytes::from("hi")): bin8.
	{"Item(Bytes)", "81 a4 4974656d c4 02 6869", Frame{Kind: KindItem, Item: unhex(nil, "c4026869")}},
	// StreamFrame::Item(vec![1u8, 2]): a Vec<u8> is a sequence, not a binary.
	{"Item(Vec<u8>)", "81 a4 4974656d 92 01 02", Frame{Kind: KindItem, Item: unhex(nil, "920102")}},
	{"SenderError", "81 ab 53656e6465724572726f72 aa 736f6674206572726f72",
		Frame{Kind: KindSenderError, Message: "soft error"}},
	{"TransportError", "81 ae 5472616e73706f72744572726f72 b0 636f6e6e656374696f6e207265736574",
		Frame{Kind: KindTransportError, Message: "connection reset"}},
	{"TransportError, empty", "81 ae 5472616e73706f72744572726f72 a0",
		Frame{Kind: KindTransportError, Message: ""}},
	// 32 bytes is the first string that needs str8.
	{"SenderError, str8", "81 ab 53656e6465724572726f72 d9 20 " + strings.Repeat("78", 32),
		Frame{Kind: KindSenderError, Message: strings.Repeat("x", 32)}},
}

func TestGoldenFrames(t *testing.T) {
	for _, g := range goldenFrames {
		want := unhex(t, g.hex)
		got, err := AppendFrame(nil, g.f)
		if err != nil || !bytes.Equal(got, want) {
			t.Errorf("%s: encoded % x, %v\nwant       % x", g.name, got, err, want)
		}
		f, err := DecodeFrame(want)
		if err != nil {
			t.Errorf("%s: decode: %v", g.name, err)
			continue
		}
		if f.Kind != g.f.Kind || !bytes.Equal(f.Item, g.f.Item) || f.Message != g.f.Message {
			t.Errorf("%s: decoded %+v, want %+v", g.name, f, g.f)
		}
		if IsTerminalFrame(want) != g.f.Kind.IsTerminal() {
			t.Errorf("%s: IsTerminalFrame = %v", g.name, !g.f.Kind.IsTerminal())
		}
	}
}

func TestSentinelConstants(t *testing.T) {
	for s, k := range map[string]Kind{DroppedFrame: KindDropped, DetachedFrame: KindDetached,
		FinalizedFrame: KindFinalized, HeartbeatFrame: KindHeartbeat} {
		got, _ := AppendFrame(nil, Frame{Kind: k})
		if string(got) != s {
			t.Errorf("%v: constant % x, AppendFrame % x", k, s, got)
		}
	}
}

// The byte item: the 11-byte header 81 a4 "Item" c6 <u32 BE len>, then
// the payload (the book, Streaming: Write an item in place).
func TestGoldenByteItemBuilder(t *testing.T) {
	cases := []struct {
		payload string
		hex     string
	}{
		{"", "81 a4 4974656d c6 00000000"},
		{"hi", "81 a4 4974656d c6 00000002 6869"},
		{strings.Repeat("z", 300), "81 a4 4974656d c6 0000012c " + strings.Repeat("7a", 300)},
	}
	for _, c := range cases {
		b := NewByteItemBuilder(len(c.payload))
		if n, err := b.Write([]byte(c.payload)); err != nil || n != len(c.payload) {
			t.Fatalf("Write: %d, %v", n, err)
		}
		got, err := b.Finish()
		want := unhex(t, c.hex)
		if err != nil || !bytes.Equal(got, want) {
			t.Errorf("payload of %d: % x, %v\nwant % x", len(c.payload), got, err, want)
		}
		f, err := DecodeFrame(want)
		if err != nil || f.Kind != KindItem {
			t.Fatalf("decode: %+v, %v", f, err)
		}
		if p, ok := f.ItemBytes(); !ok || string(p) != c.payload {
			t.Errorf("ItemBytes = %q, %v", p, ok)
		}
	}
}

// AppendBytesItem writes what rmp_serde writes for Item(Bytes): the
// smallest bin width.
func TestGoldenBytesItem(t *testing.T) {
	cases := []struct {
		n   int
		hex string // the frame without the payload
	}{
		{0, "81 a4 4974656d c4 00"},
		{255, "81 a4 4974656d c4 ff"},
		{256, "81 a4 4974656d c5 0100"},
		{65535, "81 a4 4974656d c5 ffff"},
		{65536, "81 a4 4974656d c6 00010000"},
	}
	for _, c := range cases {
		payload := bytes.Repeat([]byte{0x5a}, c.n)
		want := append(unhex(t, c.hex), payload...)
		got := AppendBytesItem(nil, payload)
		if !bytes.Equal(got, want) {
			t.Errorf("%d bytes: head % x, want % x", c.n, got[:min(len(got), 12)], want[:min(len(want), 12)])
		}
		f, err := DecodeFrame(want)
		if err != nil {
			t.Fatalf("%d bytes: %v", c.n, err)
		}
		if p, ok := f.ItemBytes(); !ok || !bytes.Equal(p, payload) {
			t.Errorf("%d bytes: ItemBytes gave %d bytes, %v", c.n, len(p), ok)
		}
	}
}

func TestByteItemBuilderRefusesChangedHeader(t *testing.T) {
	for i := 0; i < ByteItemHeaderLen; i++ {
		b := NewByteItemBuilder(4)
		b.Write([]byte("data"))
		(*b.Buffer())[i] ^= 0x01
		if _, err := b.Finish(); !errors.Is(err, ErrHeaderChanged) {
			t.Errorf("byte %d changed: %v", i, err)
		}
	}
	b := NewByteItemBuilder(0)
	*b.Buffer() = (*b.Buffer())[:5]
	if _, err := b.Finish(); !errors.Is(err, ErrHeaderChanged) {
		t.Errorf("cut header: %v", err)
	}
}

func TestByteItemBuilderSpent(t *testing.T) {
	b := NewByteItemBuilder(2)
	*b.Buffer() = append(*b.Buffer(), 'o', 'k')
	out, err := b.Finish()
	if err != nil || string(out[ByteItemHeaderLen:]) != "ok" {
		t.Fatalf("% x, %v", out, err)
	}
	if _, err := b.Finish(); !errors.Is(err, ErrBuilderFinished) {
		t.Errorf("second Finish: %v", err)
	}
	if _, err := b.Write([]byte("x")); !errors.Is(err, ErrBuilderFinished) {
		t.Errorf("Write after Finish: %v", err)
	}
}

// A payload that fits the capacity costs one allocation for the whole frame.
func TestByteItemBuilderOneAllocation(t *testing.T) {
	payload := make([]byte, 1000)
	allocs := testing.AllocsPerRun(100, func() {
		b := NewByteItemBuilder(len(payload))
		b.Write(payload)
		if _, err := b.Finish(); err != nil {
			t.Fatal(err)
		}
	})
	if allocs > 2 { // the frame, and the builder itself unless it stays on the stack
		t.Errorf("%v allocations per frame", allocs)
	}
}

func TestDecodeFrameItemDoesNotAllocate(t *testing.T) {
	b := AppendBytesItem(nil, make([]byte, 4096))
	allocs := testing.AllocsPerRun(100, func() {
		if _, err := DecodeFrame(b); err != nil {
			t.Fatal(err)
		}
	})
	if allocs != 0 {
		t.Errorf("%v allocations per decode", allocs)
	}
}

// Forms rmp_serde would also read, which this decoder takes: lengths and
// names in a wider MessagePack form than the writer picks.
func TestDecodeFrameWideForms(t *testing.T) {
	cases := []struct {
		hex  string
		kind Kind
	}{
		{"d9 07 44726f70706564", KindDropped},                            // str8 name
		{"da 0009 46696e616c697a6564", KindFinalized},                    // str16 name
		{"de 0001 a4 4974656d 2a", KindItem},                             // map16
		{"df 00000001 a4 4974656d 2a", KindItem},                         // map32
		{"81 d9 04 4974656d 2a", KindItem},                               // str8 key
		{"81 ab 53656e6465724572726f72 db 00000001 78", KindSenderError}, // str32 value
	}
	for _, c := range cases {
		f, err := DecodeFrame(unhex(t, c.hex))
		if err != nil || f.Kind != c.kind {
			t.Errorf("%s: %+v, %v", c.hex, f, err)
		}
	}
	// A Dropped in a wider form is not the cached sentinel, so the
	// reference's is_terminal_sentinel says no; so does IsTerminalFrame.
	if IsTerminalFrame(unhex(t, "d9 07 44726f70706564")) {
		t.Error("a str8 Dropped counted as terminal")
	}
	if !IsTerminalFrame(unhex(t, "81 d9 0e 5472616e73706f72744572726f72 a1 78")) {
		t.Error("a TransportError with a str8 key not counted as terminal")
	}
}

func TestDecodeFrameRefuses(t *testing.T) {
	cases := []struct{ name, hex string }{
		{"empty", ""},
		{"nil", "c0"},
		{"unknown unit variant", "a4 4e6f6e65"},
		{"Item as a unit variant", "a4 4974656d"},
		{"unit variant in map form", "81 a7 44726f70706564 c0"},
		{"variant index", "02"},
		{"two entries", "82 a4 4974656d 01 a4 4974656d 02"},
		{"empty map", "80"},
		{"item missing", "81 a4 4974656d"},
		{"item cut", "81 a4 4974656d c4 05 6869"},
		{"bytes after the item", "81 a4 4974656d 2a 2a"},
		{"bytes after a sentinel", "a7 44726f70706564 00"},
		{"message not a string", "81 ab 53656e6465724572726f72 2a"},
		{"message not UTF-8", "81 ab 53656e6465724572726f72 a1 ff"},
		{"message as binary", "81 ab 53656e6465724572726f72 c4 01 78"},
		{"huge str32 length", "81 ab 53656e6465724572726f72 db ffffffff"},
		{"huge array in the item", "81 a4 4974656d dd ffffffff"},
		{"huge map in the item", "81 a4 4974656d df 7fffffff"},
		{"reserved byte in the item", "81 a4 4974656d c1"},
		{"integer key", "81 00 2a"},
	}
	for _, c := range cases {
		b := unhex(t, c.hex)
		if f, err := DecodeFrame(b); err == nil || !errors.Is(err, ErrMalformed) {
			t.Errorf("%s: %+v, %v", c.name, f, err)
		}
		if IsTerminalFrame(b) {
			t.Errorf("%s: counted as terminal", c.name)
		}
	}
}

func TestAppendFrameRefuses(t *testing.T) {
	for _, f := range []Frame{
		{},
		{Kind: 99},
		{Kind: KindItem}, // no value
		{Kind: KindItem, Item: []byte{0x01, 0x02}},         // two values
		{Kind: KindItem, Item: []byte{0xc4, 0x05}},         // a cut value
		{Kind: KindItem, Item: []byte{0x01}, Message: "x"}, // stray message
		{Kind: KindDropped, Message: "x"},
		{Kind: KindHeartbeat, Item: []byte{0xc0}},
		{Kind: KindSenderError, Item: []byte{0xc0}},
	} {
		if b, err := AppendFrame([]byte("keep"), f); err == nil || string(b) != "keep" {
			t.Errorf("%+v: % x, %v", f, b, err)
		}
	}
}

func TestErrorFrameReplacesBadUTF8(t *testing.T) {
	b := AppendErrorFrame(nil, KindTransportError, "a\xffb")
	f, err := DecodeFrame(b)
	if err != nil || f.Message != "a\uFFFDb" {
		t.Errorf("%+v, %v", f, err)
	}
}

func TestItemBytesOnlyForBinaries(t *testing.T) {
	for _, f := range []Frame{
		{Kind: KindItem, Item: []byte{0x2a}},
		{Kind: KindItem, Item: unhex(t, "a26869")},
		{Kind: KindSenderError, Message: "x"},
		{Kind: KindItem, Item: unhex(t, "c4 03 6869")}, // cut
	} {
		if p, ok := f.ItemBytes(); ok {
			t.Errorf("%+v: ItemBytes = %q", f, p)
		}
	}
}

func TestKindString(t *testing.T) {
	if KindTransportError.String() != "TransportError" || Kind(0).String() != "Kind(0)" || Kind(0).Valid() {
		t.Error(KindTransportError.String(), Kind(0).String())
	}
}
