package rendezvous

import (
	"bytes"
	"encoding/json"
	"errors"
	"testing"
)

// The descriptor is serde's Vec<u8>: an array of integers 0..255, and
// nothing that merely looks like one.
func TestByteArrayStrict(t *testing.T) {
	good := map[string][]byte{
		`[]`: {}, `[0]`: {0}, `[255]`: {255}, `[1,1,0]`: {1, 1, 0}, ` [ 7 ,	8 ] `: {7, 8},
		`[10,100,200]`: {10, 100, 200},
	}
	for in, want := range good {
		var a byteArray
		if err := json.Unmarshal([]byte(in), &a); err != nil || !bytes.Equal(a, want) || a == nil {
			t.Errorf("%s: %v, %v; want %v", in, []byte(a), err, want)
		}
	}
	for _, in := range []string{
		`[256]`, `[1000]`, `[-1]`, `[-0]`, `[1.0]`, `[1e2]`, `[1E0]`, `["1"]`, `[null]`, `[true]`, `[[1]]`,
		`null`, `"AQE="`, `{}`, `1`, `[1,256]`, `[0.5]`,
	} {
		var a byteArray
		if err := json.Unmarshal([]byte(in), &a); err == nil {
			t.Errorf("%s decoded to %v", in, []byte(a))
		}
	}
	// The whole answer is refused with it: a descriptor that is not bytes
	// is not a descriptor that fails to decode.
	var ans acquireAnswer
	if err := json.Unmarshal([]byte(`{"Rdma":{"lease_id":5,"descriptor":[1,300],"lease_timeout_ms":1}}`), &ans); !errors.Is(err, errByteArray) {
		t.Errorf("an answer with a byte of 300: %v", err)
	}
}

// FuzzByteArray checks the decoder against encoding/json's own reading of
// the same text as unsigned integers: byteArray accepts exactly the arrays
// of unsigned integer literals up to 255 (json reads null as an empty
// slice, where a Vec<u8> is never null), and what it accepts encodes back
// to the same values.
func FuzzByteArray(f *testing.F) {
	for _, s := range []string{`[]`, `[1,1,0]`, `[255]`, `[256]`, `[-0]`, `[1.0]`, `[1e2]`, `null`, ` [ 1 ] `, `"AQE="`, `[01]`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		var a byteArray
		err := json.Unmarshal(b, &a)
		var ref []uint16
		refErr := json.Unmarshal(b, &ref)
		refOK := refErr == nil && !bytes.Equal(bytes.TrimSpace(b), []byte("null"))
		for _, v := range ref {
			refOK = refOK && v <= 255
		}
		if (err == nil) != refOK {
			t.Fatalf("%q: byteArray %v, encoding/json %v %v", b, err, ref, refErr)
		}
		if err != nil {
			return
		}
		for i, v := range ref {
			if a[i] != byte(v) {
				t.Fatalf("%q: byte %d is %d, want %d", b, i, a[i], v)
			}
		}
		out, _ := a.MarshalJSON()
		var back byteArray
		if err := json.Unmarshal(out, &back); err != nil || !bytes.Equal(back, a) {
			t.Fatalf("%q → %s → %v %v", b, out, []byte(back), err)
		}
	})
}
