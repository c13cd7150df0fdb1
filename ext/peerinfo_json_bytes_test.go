package ext

import (
	"bytes"
	"encoding/json"
	"errors"
	"strconv"
	"testing"
)

// The byte array of a hello's worker_address is read in one pass: one
// allocation (the bytes) and no encoding/json value per number. Decoding
// the numbers through encoding/json, as before, allocated the number
// slice as it grew and rescanned the array for each nested decoder, on
// the reader of a connection's first contact.
func TestJSONBytesOnePass(t *testing.T) {
	var in []byte
	for i := range 300 {
		in = strconv.AppendInt(append(in, ','), int64(i%256), 10)
	}
	in = append([]byte("["), append(in[1:], ']')...)
	var j jsonBytes
	allocs := testing.AllocsPerRun(100, func() {
		if err := j.UnmarshalJSON(in); err != nil {
			t.Fatal(err)
		}
	})
	if allocs != 1 {
		t.Errorf("decoding a 300-byte array allocated %v times, want 1 (the bytes)", allocs)
	}
	for i, b := range j {
		if int(b) != i%256 {
			t.Fatalf("byte %d = %d, want %d", i, b, i%256)
		}
	}
}

// What the one-pass reader takes and refuses, called directly (the JSON
// decoder refuses the malformed ones before they reach it).
func TestJSONBytesForms(t *testing.T) {
	for in, want := range map[string][]byte{
		`[]`:                 {},
		" \t[ ]\n":           {},
		`[0]`:                {0},
		`[255,0,10]`:         {255, 0, 10},
		"[ 1 ,\r\n2\t, 3 ] ": {1, 2, 3},
	} {
		var j jsonBytes
		if err := j.UnmarshalJSON([]byte(in)); err != nil || !bytes.Equal(j, want) {
			t.Errorf("UnmarshalJSON(%q) = %v, %v; want %v", in, []byte(j), err, want)
		}
		// encoding/json reads them the same way.
		var k jsonBytes
		if err := json.Unmarshal([]byte(in), &k); err != nil || !bytes.Equal(k, want) {
			t.Errorf("json.Unmarshal(%q) = %v, %v; want %v", in, []byte(k), err, want)
		}
	}
	for _, in := range []string{
		``, ` `, `[`, `]`, `[1`, `[1,`, `[1,]`, `[,1]`, `[1 2]`, `[1]x`, `[1][2]`, `[01]`, `[00]`, `[256]`,
		`[2550]`, `[99999999999999999999999]`, `[-1]`, `[-0]`, `[+1]`, `[1.0]`, `[1e2]`, `[0x10]`, `["1"]`,
		`[null]`, `[true]`, `[[1]]`, `[{}]`, `null`, `1`, `"abc"`, `{}`,
	} {
		var j jsonBytes
		if err := j.UnmarshalJSON([]byte(in)); err == nil {
			t.Errorf("UnmarshalJSON(%q) = %v, want an error", in, []byte(j))
		}
	}
}

// The one-pass reader takes exactly what encoding/json takes as an array
// of numbers 0-255, with the same bytes, for any input (null aside: the
// reader is only handed arrays, and refuses it).
func FuzzJSONBytesMatchesEncodingJSON(f *testing.F) {
	for _, s := range []string{`[]`, `[0,255]`, "[ 1 ,\r\n2\t]", `[256]`, `[01]`, `[1.0]`, `[-0]`, `[1,]`, `[[1]]`, `[1]x`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, in []byte) {
		if string(bytes.TrimSpace(in)) == "null" {
			return
		}
		var j jsonBytes
		err := j.UnmarshalJSON(in)
		var nums []uint16
		ref := json.Unmarshal(in, &nums)
		if ref == nil && nums == nil {
			ref = errNotArray // only null decodes to a nil slice
		}
		for _, n := range nums {
			if ref == nil && n > 255 {
				ref = errNotArray
			}
		}
		if (err == nil) != (ref == nil) {
			t.Fatalf("%q: one pass says %v, encoding/json %v", in, err, ref)
		}
		if err != nil {
			return
		}
		if len(j) != len(nums) {
			t.Fatalf("%q: %d bytes, encoding/json %d", in, len(j), len(nums))
		}
		for i, n := range nums {
			if byte(n) != j[i] {
				t.Fatalf("%q: byte %d = %d, encoding/json %d", in, i, j[i], n)
			}
		}
	})
}

var errNotArray = errors.New("not an array of 0-255")
