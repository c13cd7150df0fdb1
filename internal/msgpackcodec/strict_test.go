package msgpackcodec

import (
	"encoding/hex"
	"errors"
	"io"
	"math"
	"reflect"
	"strings"
	"testing"

	"github.com/vmihailenco/msgpack/v5"
)

type rtItem struct {
	ID     uint64
	Text   string
	Score  float64
	Tags   []string
	Parent *rtItem
	Attrs  map[string]int32
	Raw    []byte
	Any    any
	Skip   int `msgpack:"-"`
	hidden int
}

func TestRoundTrip(t *testing.T) {
	in := rtItem{
		ID: math.MaxUint64, Text: "ünï", Score: -1e300, Tags: []string{"a", ""},
		Parent: &rtItem{ID: 1, Tags: []string{}, Attrs: map[string]int32{}, Raw: []byte{}},
		Attrs:  map[string]int32{"x": -1, "y": math.MaxInt32}, Raw: []byte{0, 255},
		Any: map[string]any{"k": []any{int64(1), "s", nil, true, 2.5, []byte{9}}},
	}
	in.Skip, in.hidden = 4, 5 // neither travels
	b, err := Marshal(in)
	if err != nil {
		t.Fatal(err)
	}
	in.Skip, in.hidden = 0, 0
	var out rtItem
	if err := Unmarshal(b, &out); err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(out, in) {
		t.Fatalf("round trip:\n got %#v\nwant %#v", out, in)
	}
}

// A struct decodes from the map form too, skipping unknown names.
func TestReadsNamedStruct(t *testing.T) {
	// {"Text": "w", "ID": 3, "extra": [1]}
	b, _ := hex.DecodeString("83a454657874a177a2494403a565787472619101")
	var v gToken
	if err := Unmarshal(b, &v); err != nil || v != (gToken{ID: 3, Text: "w"}) {
		t.Fatalf("got %+v, %v", v, err)
	}
}

func TestStrictErrors(t *testing.T) {
	cases := []struct {
		name string
		hex  string
		into any
		is   error
		says string
	}{
		{"trailing", "0101", new(uint8), ErrTrailingBytes, "trailing"},
		{"empty", "", new(uint8), io.ErrUnexpectedEOF, "EOF"},
		{"u8 overflow", "cd012c", new(uint8), ErrMismatch, "300 overflows uint8"},
		{"negative uint", "ff", new(uint32), ErrMismatch, "negative"},
		{"i64 from u64 max", "cfffffffffffffffff", new(int64), ErrMismatch, "overflows"},
		{"int from str", "a161", new(int), ErrMismatch, "want an integer, got a string (0xa1)"},
		{"bad utf8", "a1ff", new(string), ErrMismatch, "UTF-8"},
		{"struct short", "9207a26869", new(gToken), ErrMismatch, "an array of 2"},
		{"struct long", "9407a26869ca3f80000001", new(gToken), ErrMismatch, "an array of 4"},
		{"struct nil", "c0", new(gToken), ErrMismatch, "got nil"},
		{"field type", "93a178a26869ca3f800000", new(gToken), ErrMismatch, "gToken.ID"},
		{"huge array", "dd7fffffff", new([]int), io.ErrUnexpectedEOF, "length"},
		{"huge map", "df7fffffff", new(map[string]int), io.ErrUnexpectedEOF, "length"},
		{"huge str", "db7fffffff", new(string), io.ErrUnexpectedEOF, "length"},
		{"cut str", "a3616263"[:6], new(string), io.ErrUnexpectedEOF, "EOF"},
		{"fixed array", "920102", new([3]int), ErrMismatch, "an array of 2"},
		{"ext in any", "d40100", new(any), ErrUnsupported, "extension"},
		{"deep", strings.Repeat("91", 2000) + "c0", new(any), ErrUnsupported, "deeper"},
	}
	for _, c := range cases {
		b, err := hex.DecodeString(c.hex)
		if err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		err = Unmarshal(b, c.into)
		if !errors.Is(err, c.is) || !strings.Contains(err.Error(), c.says) {
			t.Errorf("%s: got %v, want %v saying %q", c.name, err, c.is, c.says)
		}
	}
}

func TestUnsupported(t *testing.T) {
	type withTag struct {
		A int `msgpack:"a,omitempty"`
	}
	type cycle struct{ Next *cycle }
	c := &cycle{}
	c.Next = c
	for _, v := range []any{make(chan int), func() {}, complex(1, 2), withTag{}, struct{ x int }{}, c} {
		if _, err := Marshal(v); !errors.Is(err, ErrUnsupported) {
			t.Errorf("Marshal(%T) = %v, want ErrUnsupported", v, err)
		}
	}
	if err := Check(reflect.TypeFor[chan int]()); !errors.Is(err, ErrUnsupported) {
		t.Errorf("Check(chan int) = %v", err)
	}
	if err := Check(reflect.TypeFor[rtItem]()); err != nil {
		t.Errorf("Check(rtItem) = %v", err)
	}
}

type node struct {
	V    int
	Kids []node
}

// A recursive type, and a type that encodes itself through
// vmihailenco/msgpack (RawMessage), inside a struct.
func TestRecursiveAndSelfEncoding(t *testing.T) {
	in := node{1, []node{{2, nil}, {3, []node{{4, nil}}}}}
	b, err := Marshal(in)
	if err != nil {
		t.Fatal(err)
	}
	if b[0] != 0x92 {
		t.Fatalf("node = %x", b)
	}
	var out node
	if err := Unmarshal(b, &out); err != nil || !equalish(out, in) {
		t.Fatalf("node back = %+v, %v", out, err)
	}
	type wrap struct {
		Raw msgpack.RawMessage
		N   uint8
	}
	b, err = Marshal(wrap{msgpack.RawMessage{0x92, 0x01, 0x02}, 5})
	if err != nil || hex.EncodeToString(b) != "9292010205" {
		t.Fatalf("wrap = %x, %v", b, err)
	}
	var w wrap
	if err := Unmarshal(b, &w); err != nil || hex.EncodeToString(w.Raw) != "920102" || w.N != 5 {
		t.Fatalf("wrap back = %+v, %v", w, err)
	}
}
