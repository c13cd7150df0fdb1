package mpread

import (
	"bytes"
	"testing"

	"github.com/vmihailenco/msgpack/v5"
)

// FuzzSkip: no input panics, and what Skip accepts an independent decoder
// (vmihailenco/msgpack) accepts too, ending at the same byte. The typed
// readers, when they succeed, read what that decoder reads. The reference
// runs only on what the reader accepted: it may allocate the length a
// hostile header announces before finding the bytes missing.
func FuzzSkip(f *testing.F) {
	for _, s := range []string{
		"\x81\xa4Item\xc4\x03abc", "\x92\xcf\x00\x00\x00\x00\x00\x00\x00\x01\x05",
		"\xdd\x7f\xff\xff\xff", "\xa3abc", "\xd3\xff\xff\xff\xff\xff\xff\xff\xff",
		"\xc7\x01\x05x", "\x91\x91\x91\x91", "\xc1",
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		r := New(b, errKind)
		if err := r.Skip(); err == nil {
			d := msgpack.NewDecoder(bytes.NewReader(b))
			refErr := d.Skip()
			if refErr != nil {
				t.Fatalf("Skip took % x, reference refused: %v", b[:r.Offset()], refErr)
			}
			if rest := d.Buffered().(*bytes.Reader).Len(); rest != r.Len() {
				t.Fatalf("Skip left %d bytes, reference %d", r.Len(), rest)
			}
		}
		typed(t, b)
	})
}

func typed(t *testing.T, b []byte) {
	if r := New(b, errKind); true {
		if v, err := r.Str(); err == nil {
			var want string
			if msgpack.Unmarshal(b[:r.Offset()], &want) != nil || want != string(v) {
				t.Fatalf("Str(% x) = %q, reference %q", b, v, want)
			}
		}
	}
	if r := New(b, errKind); true {
		if v, err := r.Int(); err == nil {
			var want int64
			if msgpack.Unmarshal(b[:r.Offset()], &want) != nil || want != v {
				t.Fatalf("Int(% x) = %d, reference %d", b, v, want)
			}
		}
	}
	if r := New(b, errKind); true {
		if v, err := r.Uint(); err == nil {
			var want uint64
			if msgpack.Unmarshal(b[:r.Offset()], &want) != nil || want != v {
				t.Fatalf("Uint(% x) = %d, reference %d", b, v, want)
			}
		}
	}
}
