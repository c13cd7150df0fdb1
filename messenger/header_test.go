package messenger

import (
	"bytes"
	"errors"
	"fmt"
	"maps"
	"runtime"
	"strings"
	"testing"
)

func sampleHeaders() map[string]string {
	return map[string]string{
		"a":                     "",
		"trace-id":              "4bf92f3577b34da6a3ce929d0e0e4736",
		"str8-value":            strings.Repeat("s", 200),            // 0xd9
		"str16-value":           strings.Repeat("l", MaxHeaderValue), // 0xda
		"unicode":               "héllo ✓",
		strings.Repeat("k", 40): "key of 40 bytes (str8)",
	}
}

func TestRequestHeaderRoundTrip(t *testing.T) {
	big := map[string]string{}
	for i := range 20 { // map16 (0xde): 16 entries or more
		big[fmt.Sprintf("key-%02d", i)] = strings.Repeat("v", 500)
	}
	for _, hs := range []map[string]string{nil, {"k": "v"}, sampleHeaders(), big} {
		hb, err := EncodeHeaders(hs)
		if err != nil {
			t.Fatal(err)
		}
		for _, rt := range []ResponseType{FireAndForget, AckNack, UnaryResponse} {
			for _, name := range []string{"x", "ping", "_hello", strings.Repeat("n", maxHandlerName)} {
				id := ResponseID{Lo: 0xfedcba9876543210, Hi: 7<<16 | 3}
				b := appendRequestHeader(nil, rt, id, name, hb)
				if want := fixedHeaderLen + len(name) + 2 + len(hb); len(b) != want {
					t.Fatalf("encoded %d bytes, want %d", len(b), want)
				}
				h, err := parseRequestHeader(b)
				if err != nil {
					t.Fatalf("%v %q: %v", rt, name, err)
				}
				if h.rtype != rt || h.id != id || string(h.handler) != name || !bytes.Equal(h.headers, hb) {
					t.Fatalf("round trip changed the header: %+v", h)
				}
				got, err := DecodeHeaders(h.headers)
				if err != nil {
					t.Fatal(err)
				}
				if len(got) != len(hs) || !maps.Equal(got, hs) && len(hs) > 0 {
					t.Fatalf("headers %v, want %v", got, hs)
				}
				// Re-encoding gives the same bytes: the encoding is canonical.
				if again := appendRequestHeader(nil, h.rtype, h.id, string(h.handler), h.headers); !bytes.Equal(again, b) {
					t.Fatal("re-encoding differs")
				}
			}
		}
	}
}

func TestRequestHeaderWireLayout(t *testing.T) {
	b := appendRequestHeader(nil, UnaryResponse, ResponseID{Hi: 0x1122334455667788, Lo: 0x99aabbccddeeff00}, "ab", []byte{0x80})
	want := []byte{
		1, 2, // schema, response type
		0x00, 0xff, 0xee, 0xdd, 0xcc, 0xbb, 0xaa, 0x99, // u128 LE: low half first
		0x88, 0x77, 0x66, 0x55, 0x44, 0x33, 0x22, 0x11,
		2, 0, 'a', 'b', // u16 LE name length, name
		1, 0, 0x80, // u16 LE headers length, an empty MessagePack map
	}
	if !bytes.Equal(b, want) {
		t.Fatalf("wire layout\n got % x\nwant % x", b, want)
	}
}

func TestParseRequestHeaderRejects(t *testing.T) {
	hb, err := EncodeHeaders(sampleHeaders())
	if err != nil {
		t.Fatal(err)
	}
	valid := appendRequestHeader(nil, AckNack, ResponseID{Hi: 1, Lo: 2}, "handler", hb)
	// Every truncation fails, and so does a trailing byte.
	for n := range len(valid) {
		if _, err := parseRequestHeader(valid[:n]); !errors.Is(err, ErrMalformedHeader) {
			t.Fatalf("a header cut to %d of %d bytes parsed (%v)", n, len(valid), err)
		}
	}
	if _, err := parseRequestHeader(append(valid[:len(valid):len(valid)], 0)); !errors.Is(err, ErrMalformedHeader) {
		t.Fatal("a trailing byte parsed")
	}
	bad := func(mut func([]byte) []byte) []byte { return mut(bytes.Clone(valid)) }
	for name, b := range map[string][]byte{
		"schema 0":         bad(func(b []byte) []byte { b[0] = 0; return b }),
		"schema 2":         bad(func(b []byte) []byte { b[0] = 2; return b }),
		"response type 3":  bad(func(b []byte) []byte { b[1] = 3; return b }),
		"name past end":    bad(func(b []byte) []byte { b[18], b[19] = 0xff, 0xff; return b }),
		"headers short":    bad(func(b []byte) []byte { b[20+7]++; return b }),
		"name too long":    appendRequestHeader(nil, AckNack, ResponseID{}, strings.Repeat("n", maxHandlerName+1), nil),
		"headers too long": appendRequestHeader(nil, AckNack, ResponseID{}, "h", make([]byte, MaxEncodedHeaders+1)),
	} {
		if _, err := parseRequestHeader(b); !errors.Is(err, ErrMalformedHeader) {
			t.Errorf("%s: parsed (%v)", name, err)
		}
	}
	// At the limits is fine.
	if _, err := parseRequestHeader(appendRequestHeader(nil, AckNack, ResponseID{}, strings.Repeat("n", maxHandlerName), make([]byte, MaxEncodedHeaders))); err != nil {
		t.Errorf("limits: %v", err)
	}
}

func TestEncodeHeadersLimits(t *testing.T) {
	if b, err := EncodeHeaders(nil); b != nil || err != nil {
		t.Fatalf("nil headers: %v %v", b, err)
	}
	if _, err := EncodeHeaders(map[string]string{"k": strings.Repeat("x", MaxHeaderValue)}); err != nil {
		t.Fatalf("a value of exactly 1 KiB: %v", err)
	}
	_, err := EncodeHeaders(map[string]string{"k": strings.Repeat("x", MaxHeaderValue+1)})
	if err == nil || !strings.Contains(err.Error(), `"k"`) {
		t.Fatalf("a value over 1 KiB: %v", err)
	}
	many := map[string]string{}
	for i := range 17 {
		many[fmt.Sprint(i)] = strings.Repeat("x", MaxHeaderValue)
	}
	if _, err := EncodeHeaders(many); err == nil {
		t.Fatal("17 KiB of headers encoded")
	}
	// A key is bounded only by the total.
	if _, err := EncodeHeaders(map[string]string{strings.Repeat("k", MaxEncodedHeaders): ""}); err == nil {
		t.Fatal("a 16 KiB key encoded")
	}
}

func TestDecodeHeadersRejects(t *testing.T) {
	valid, err := EncodeHeaders(sampleHeaders())
	if err != nil {
		t.Fatal(err)
	}
	if got, err := DecodeHeaders(nil); got != nil || err != nil {
		t.Fatalf("no bytes: %v %v", got, err)
	}
	for n := 1; n < len(valid); n++ {
		if _, err := DecodeHeaders(valid[:n]); !errors.Is(err, ErrMalformedHeader) {
			t.Fatalf("headers cut to %d of %d bytes decoded (%v)", n, len(valid), err)
		}
	}
	for name, b := range map[string][]byte{
		"trailing byte":     append(bytes.Clone(valid), 0xa0),
		"not a map":         {0x92, 0xa1, 'a', 0xa1, 'b'},
		"int key":           {0x81, 0x01, 0xa1, 'b'},
		"bin value":         {0x81, 0xa1, 'a', 0xc4, 1, 'b'},
		"nil value":         {0x81, 0xa1, 'a', 0xc0},
		"bad utf-8 key":     {0x81, 0xa1, 0xff, 0xa1, 'b'},
		"bad utf-8 value":   {0x81, 0xa1, 'a', 0xa2, 0xc3, 0x28},
		"map16 truncated":   {0xde, 0x00},
		"str8 truncated":    {0x81, 0xd9},
		"str16 truncated":   {0x81, 0xda, 0x00},
		"huge count":        {0xde, 0xff, 0xff, 0xa0, 0xa0},
		"string past end":   {0x81, 0xa5, 'a', 0xa1, 'b'},
		"value over 1 KiB":  append([]byte{0x81, 0xa1, 'k', 0xda, 0x04, 0x01}, bytes.Repeat([]byte{'v'}, 1025)...),
		"over 16 KiB total": append([]byte{0x81, 0xa1, 'k', 0xda, 0x40, 0x01}, bytes.Repeat([]byte{'v'}, 16385)...),
	} {
		if _, err := DecodeHeaders(b); !errors.Is(err, ErrMalformedHeader) {
			t.Errorf("%s: decoded (%v)", name, err)
		}
	}
	// A count that the bytes cannot hold is refused before any allocation.
	huge := []byte{0xde, 0xff, 0xff, 0xa0, 0xa0}
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	for range 100 {
		DecodeHeaders(huge)
	}
	runtime.ReadMemStats(&after)
	if per := (after.TotalAlloc - before.TotalAlloc) / 100; per > 512 {
		t.Fatalf("a 5-byte map claiming 65535 entries cost %d bytes to refuse", per)
	}
}

// TestDecodeHeadersAcceptsOtherEncoders: the map may come from another
// MessagePack encoder (the Rust peer's keys are in hash order, and its
// string widths need not be the smallest). Decoding accepts that; the
// re-encoding is the canonical form.
func TestDecodeHeadersAcceptsOtherEncoders(t *testing.T) {
	b := []byte{0xde, 0x00, 0x02, // map16 of 2, where fixmap would do
		0xa1, 'z', 0xd9, 0x01, 'y', // str8 of 1, where fixstr would do
		0xda, 0x00, 0x01, 'a', 0xa1, 'b'}
	got, err := DecodeHeaders(b)
	if err != nil {
		t.Fatal(err)
	}
	if want := map[string]string{"z": "y", "a": "b"}; !maps.Equal(got, want) {
		t.Fatalf("decoded %v", got)
	}
	canon, err := EncodeHeaders(got)
	if err != nil {
		t.Fatal(err)
	}
	if want := []byte{0x82, 0xa1, 'a', 0xa1, 'b', 0xa1, 'z', 0xa1, 'y'}; !bytes.Equal(canon, want) {
		t.Fatalf("canonical form % x", canon)
	}
}

// TestEncodeHeadersRefusesNonUTF8 pins a bug: EncodeHeaders sends a key or
// value that is not UTF-8 (MessagePack str must be), the receiver's
// DecodeHeaders refuses the whole map, and the handler sees an error from
// Headers() for a call that the caller thought went fine.
func TestEncodeHeadersRefusesNonUTF8(t *testing.T) {
	for _, h := range []map[string]string{{"k": "\xff"}, {"\xc3\x28": "v"}} {
		if _, err := EncodeHeaders(h); err == nil {
			t.Errorf("EncodeHeaders(%q) accepted what DecodeHeaders refuses", h)
		}
	}
}
