package msgpackcodec

import (
	"bytes"
	"testing"
)

// FuzzUnmarshal: no input panics or allocates past its own size, and what
// decodes re-encodes to bytes that decode to the same encoding.
func FuzzUnmarshal(f *testing.F) {
	for _, b := range readGoldenF(f) {
		f.Add(b)
	}
	f.Add([]byte("\xdd\x7f\xff\xff\xff"))
	f.Fuzz(func(t *testing.T, b []byte) {
		var out gOuter
		if Unmarshal(b, &out) == nil {
			again(t, &out)
		}
		var x any
		if Unmarshal(b, &x) == nil {
			again(t, &x)
		}
		var m map[string][]*gToken
		if Unmarshal(b, &m) == nil {
			again(t, &m)
		}
	})
}

func again[T any](t *testing.T, v *T) {
	b1, err := Marshal(*v)
	if err != nil {
		t.Fatalf("re-encode %#v: %v", *v, err)
	}
	var w T
	if err := Unmarshal(b1, &w); err != nil {
		t.Fatalf("decode own %x: %v", b1, err)
	}
	b2, _ := Marshal(w)
	if !bytes.Equal(b1, b2) {
		t.Fatalf("not stable: %x then %x", b1, b2)
	}
}

func readGoldenF(f *testing.F) [][]byte {
	var t testing.T
	var out [][]byte
	for _, b := range readGolden(&t) {
		out = append(out, b)
	}
	return out
}
