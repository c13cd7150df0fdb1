package events_test

import (
	"bytes"
	"encoding/json"
	"errors"
	"strings"
	"testing"

	"github.com/velo-go/velo/events"
)

var sampleHandle = events.Handle{Hi: 0x0102030405060708, Lo: 0x1112131415161718}

// The wire form is fixed: a two-entry map, fixstr keys, uint64 values.
func TestHandleMarshalMsgpackBytes(t *testing.T) {
	want := []byte{
		0x82,
		0xa2, 'h', 'i', 0xcf, 0x01, 0x02, 0x03, 0x04, 0x05, 0x06, 0x07, 0x08,
		0xa2, 'l', 'o', 0xcf, 0x11, 0x12, 0x13, 0x14, 0x15, 0x16, 0x17, 0x18,
	}
	if got := sampleHandle.MarshalMsgpack(); !bytes.Equal(got, want) {
		t.Fatalf("MarshalMsgpack = % x\nwant             % x", got, want)
	}
	// Zero values keep the full width: the form never changes length.
	if got := (events.Handle{}).MarshalMsgpack(); len(got) != len(want) {
		t.Fatalf("zero handle encodes in %d bytes, want %d", len(got), len(want))
	}
}

func TestHandleUnmarshalMsgpackAccepts(t *testing.T) {
	key := func(k string) []byte { return []byte{0xa2, k[0], k[1]} }
	cat := func(parts ...[]byte) []byte { return bytes.Join(parts, nil) }
	cases := []struct {
		name string
		in   []byte
		want events.Handle
	}{
		{"canonical", sampleHandle.MarshalMsgpack(), sampleHandle},
		{"fixint", cat([]byte{0x82}, key("hi"), []byte{0x05}, key("lo"), []byte{0x7f}), events.Handle{Hi: 5, Lo: 0x7f}},
		{"uint8", cat([]byte{0x82}, key("hi"), []byte{0xcc, 0xff}, key("lo"), []byte{0xcc, 0x80}), events.Handle{Hi: 0xff, Lo: 0x80}},
		{"uint16", cat([]byte{0x82}, key("hi"), []byte{0xcd, 0x12, 0x34}, key("lo"), []byte{0xcd, 0xab, 0xcd}), events.Handle{Hi: 0x1234, Lo: 0xabcd}},
		{"uint32", cat([]byte{0x82}, key("hi"), []byte{0xce, 1, 2, 3, 4}, key("lo"), []byte{0xce, 0xff, 0xff, 0xff, 0xff}), events.Handle{Hi: 0x01020304, Lo: 0xffffffff}},
		{"mixed widths", cat([]byte{0x82}, key("hi"), []byte{0xcf, 0, 0, 0, 0, 0, 0, 0, 9}, key("lo"), []byte{0x00}), events.Handle{Hi: 9}},
		{"lo first", cat([]byte{0x82}, key("lo"), []byte{0xcc, 0x02}, key("hi"), []byte{0xcd, 0x01, 0x00}), events.Handle{Hi: 0x100, Lo: 2}},
	}
	for _, c := range cases {
		var h events.Handle
		if err := h.UnmarshalMsgpack(c.in); err != nil {
			t.Errorf("%s: % x: %v", c.name, c.in, err)
			continue
		}
		if h != c.want {
			t.Errorf("%s: got %s, want %s", c.name, h, c.want)
		}
	}
}

func TestHandleUnmarshalMsgpackRejects(t *testing.T) {
	good := sampleHandle.MarshalMsgpack()
	cases := map[string][]byte{
		"empty":             nil,
		"nil":               {0xc0},
		"one-entry map":     {0x81, 0xa2, 'h', 'i', 0x01},
		"three-entry map":   append([]byte{0x83}, good[1:]...),
		"map16 header":      append([]byte{0xde, 0x00, 0x02}, good[1:]...),
		"truncated":         good[:len(good)-1],
		"trailing byte":     append(append([]byte(nil), good...), 0x00),
		"unknown key":       {0x82, 0xa2, 'h', 'i', 0x01, 0xa2, 'l', 'x', 0x02},
		"duplicate key":     {0x82, 0xa2, 'h', 'i', 0x01, 0xa2, 'h', 'i', 0x02},
		"long key":          {0x82, 0xa3, 'h', 'i', 'x', 0x01, 0xa2, 'l', 'o', 0x02},
		"negative fixint":   {0x82, 0xa2, 'h', 'i', 0xff, 0xa2, 'l', 'o', 0x02},
		"signed int64":      {0x82, 0xa2, 'h', 'i', 0xd3, 0, 0, 0, 0, 0, 0, 0, 1, 0xa2, 'l', 'o', 0x02},
		"string value":      {0x82, 0xa2, 'h', 'i', 0xa1, '1', 0xa2, 'l', 'o', 0x02},
		"float value":       {0x82, 0xa2, 'h', 'i', 0xcb, 0, 0, 0, 0, 0, 0, 0, 0, 0xa2, 'l', 'o', 0x02},
		"short uint32":      {0x82, 0xa2, 'h', 'i', 0xce, 1, 2, 3},
		"key only":          {0x82, 0xa2, 'h', 'i'},
		"array of two":      {0x92, 0x01, 0x02},
		"map header only":   {0x82},
		"truncated key":     {0x82, 0xa2, 'h'},
		"str8 key (unused)": {0x82, 0xd9, 0x02, 'h', 'i', 0x01, 0xa2, 'l', 'o', 0x02},
	}
	for name, in := range cases {
		var h events.Handle
		err := h.UnmarshalMsgpack(in)
		if err == nil {
			t.Errorf("%s: % x decoded to %s, want an error", name, in, h)
			continue
		}
		if !errors.Is(err, events.ErrMalformedHandle) {
			t.Errorf("%s: error %v does not match ErrMalformedHandle", name, err)
		}
	}
}

func TestHandleTextAndJSON(t *testing.T) {
	txt, err := sampleHandle.MarshalText()
	if err != nil {
		t.Fatal(err)
	}
	if string(txt) != "01020304050607081112131415161718" {
		t.Fatalf("MarshalText = %s", txt)
	}
	var h events.Handle
	if err := h.UnmarshalText(txt); err != nil || h != sampleHandle {
		t.Fatalf("UnmarshalText: %s, %v", h, err)
	}
	j, err := json.Marshal(map[string]events.Handle{"h": sampleHandle})
	if err != nil {
		t.Fatal(err)
	}
	var back map[string]events.Handle
	if err := json.Unmarshal(j, &back); err != nil || back["h"] != sampleHandle {
		t.Fatalf("JSON round trip of %s: %s, %v", j, back["h"], err)
	}
}

// FuzzHandleMsgpack: decoding never panics, and whatever decodes
// re-encodes to the canonical form and decodes to the same handle.
func FuzzHandleMsgpack(f *testing.F) {
	f.Add(sampleHandle.MarshalMsgpack())
	f.Add(events.Handle{}.MarshalMsgpack())
	f.Add(events.Handle{Hi: ^uint64(0), Lo: ^uint64(0)}.MarshalMsgpack())
	f.Add([]byte{0x82, 0xa2, 'l', 'o', 0xcc, 0x02, 0xa2, 'h', 'i', 0x01})
	f.Add([]byte{0x82, 0xa2, 'h', 'i', 0xcd, 0x01, 0x00, 0xa2, 'l', 'o', 0xce, 0, 0, 0, 1})
	f.Add([]byte{0x82, 0xa2, 'h', 'i', 0x01, 0xa2, 'h', 'i', 0x02})
	f.Add([]byte{0x82})
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, b []byte) {
		var h events.Handle
		if err := h.UnmarshalMsgpack(b); err != nil {
			if !errors.Is(err, events.ErrMalformedHandle) {
				t.Fatalf("error %v does not match ErrMalformedHandle", err)
			}
			return
		}
		enc := h.MarshalMsgpack()
		var back events.Handle
		if err := back.UnmarshalMsgpack(enc); err != nil {
			t.Fatalf("re-encoded % x does not decode: %v", enc, err)
		}
		if back != h {
			t.Fatalf("% x decoded to %s, its re-encoding to %s", b, h, back)
		}
		if len(b) > len(enc) {
			t.Fatalf("% x decoded, but is longer than the widest form", b)
		}
	})
}

// FuzzHandleText: decoding never panics, and whatever decodes was the
// canonical text of that handle (hex case aside).
func FuzzHandleText(f *testing.F) {
	txt, _ := sampleHandle.MarshalText()
	f.Add(string(txt))
	f.Add(strings.Repeat("0", 32))
	f.Add(strings.Repeat("F", 32))
	f.Add("0102030405060708")
	f.Fuzz(func(t *testing.T, s string) {
		var h events.Handle
		if err := h.UnmarshalText([]byte(s)); err != nil {
			return
		}
		enc, _ := h.MarshalText()
		if string(enc) != strings.ToLower(s) {
			t.Fatalf("%q decoded to %s, which reads %q", s, h, enc)
		}
	})
}
