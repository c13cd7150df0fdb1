package mpread

import (
	"bytes"
	"errors"
	"math"
	"testing"
)

var errKind = errors.New("test: malformed")

func reader(b []byte) *Reader {
	r := New(b, errKind)
	return &r
}

// Vectors written by hand from the MessagePack spec, one per form.
func TestStrForms(t *testing.T) {
	long := bytes.Repeat([]byte("x"), 300)
	for _, c := range []struct {
		in   []byte
		want []byte
	}{
		{[]byte("\xa3abc"), []byte("abc")},
		{[]byte("\xd9\x03abc"), []byte("abc")},
		{[]byte("\xda\x00\x03abc"), []byte("abc")},
		{[]byte("\xdb\x00\x00\x00\x03abc"), []byte("abc")},
		{append([]byte("\xda\x01\x2c"), long...), long},
		{[]byte("\xa0"), []byte{}},
	} {
		r := reader(c.in)
		got, err := r.StrUTF8()
		if err != nil || !bytes.Equal(got, c.want) || r.Len() != 0 {
			t.Errorf("Str(% x) = %q, %v, %d left", c.in, got, err, r.Len())
		}
	}
}

func TestBinAndNil(t *testing.T) {
	r := reader([]byte("\xc4\x02hi\xc5\x00\x01x\xc6\x00\x00\x00\x00\xc0\x01"))
	for _, want := range []string{"hi", "x", ""} {
		if got, err := r.Bin(); err != nil || string(got) != want {
			t.Fatalf("Bin = %q, %v; want %q", got, err, want)
		}
	}
	if !r.Nil() || r.Nil() {
		t.Fatal("Nil should read the nil once and then refuse the integer")
	}
	if v, err := r.Uint(); err != nil || v != 1 {
		t.Fatalf("Uint = %d, %v", v, err)
	}
}

func TestIntegers(t *testing.T) {
	for _, c := range []struct {
		in      string
		i       int64
		iOK     bool
		u       uint64
		uOK     bool
		comment string
	}{
		{"\x7f", 127, true, 127, true, "positive fixint"},
		{"\xff", -1, true, 0, false, "negative fixint"},
		{"\xcc\xff", 255, true, 255, true, "uint8"},
		{"\xcd\x01\x00", 256, true, 256, true, "uint16"},
		{"\xce\x00\x01\x00\x00", 65536, true, 65536, true, "uint32"},
		{"\xcf\xff\xff\xff\xff\xff\xff\xff\xff", 0, false, math.MaxUint64, true, "uint64 past int64"},
		{"\xd0\x80", -128, true, 0, false, "int8"},
		{"\xd1\x00\x05", 5, true, 5, true, "int16, not negative"},
		{"\xd2\xff\xff\xff\xfe", -2, true, 0, false, "int32"},
		{"\xd3\x80\x00\x00\x00\x00\x00\x00\x00", math.MinInt64, true, 0, false, "int64"},
		{"\xa1x", 0, false, 0, false, "a string"},
		{"\xcd\x01", 0, false, 0, false, "truncated"},
	} {
		i, err := reader([]byte(c.in)).Int()
		if (err == nil) != c.iOK || (c.iOK && i != c.i) {
			t.Errorf("%s: Int = %d, %v", c.comment, i, err)
		}
		u, err := reader([]byte(c.in)).Uint()
		if (err == nil) != c.uOK || (c.uOK && u != c.u) {
			t.Errorf("%s: Uint = %d, %v", c.comment, u, err)
		}
		if err != nil && !errors.Is(err, errKind) {
			t.Errorf("%s: error %v does not wrap the kind", c.comment, err)
		}
	}
}

func TestContainers(t *testing.T) {
	r := reader([]byte("\x82\xa1a\x01\xa1b\x92\xc0\xc3"))
	if n, err := r.MapLen(); err != nil || n != 2 {
		t.Fatalf("MapLen = %d, %v", n, err)
	}
	if err := r.Skip(); err != nil || r.Offset() != 3 {
		t.Fatalf("Skip key: %v at %d", err, r.Offset())
	}
	if err := r.Skip(); err != nil {
		t.Fatal(err)
	}
	if _, err := r.Str(); err != nil {
		t.Fatal(err)
	}
	if n, err := r.ArrayLen(); err != nil || n != 2 {
		t.Fatalf("ArrayLen = %d, %v", n, err)
	}
	// Counts that cannot fit in what is left are refused before anything
	// is sized by them.
	for _, in := range []string{"\xdf\xff\xff\xff\xff", "\xdd\x00\x00\x00\x02\x01", "\x8f\x01"} {
		r := reader([]byte(in))
		var err error
		if in[0] == 0xdd {
			_, err = r.ArrayLen()
		} else {
			_, err = r.MapLen()
		}
		if !errors.Is(err, errKind) {
			t.Errorf("% x: %v, want a refusal", in, err)
		}
	}
}

func TestSkipForms(t *testing.T) {
	for _, in := range []string{
		"\xc0", "\xc2", "\xc3", "\x05", "\xe0", "\xa2hi", "\xd9\x01x", "\xc4\x01x",
		"\xca\x00\x00\x00\x00", "\xcb\x00\x00\x00\x00\x00\x00\x00\x00",
		"\xd4\x01\x02", "\xd8\x01" + string(make([]byte, 16)), "\xc7\x01\x05x",
		"\x91\x91\x91\x00", "\xdc\x00\x01\x80", "\xde\x00\x01\xa0\xc0",
	} {
		r := reader([]byte(in + "\xff"))
		if err := r.Skip(); err != nil || r.Len() != 1 {
			t.Errorf("Skip(% x) = %v, %d left; want the value and nothing more", in, err, r.Len())
		}
	}
	for _, in := range []string{"\xc1", "\x92\x01", "\xa5ab", "\xdd\xff\xff\xff\xff", ""} {
		if err := reader([]byte(in)).Skip(); !errors.Is(err, errKind) {
			t.Errorf("Skip(% x) = %v, want a refusal", in, err)
		}
	}
}

func TestErrorsCarryTheKind(t *testing.T) {
	r := reader([]byte("\xa2\xff\xfe"))
	_, err := r.StrUTF8()
	if !errors.Is(err, errKind) || err.Error() != "test: malformed: string is not UTF-8" {
		t.Fatalf("err = %v", err)
	}
	r = reader([]byte{0x01})
	if c, ok := r.Peek(); !ok || c != 1 || !bytes.Equal(r.Rest(), []byte{1}) {
		t.Fatal("Peek read the byte")
	}
}

// Reading a typical stream frame and header map costs no allocation: these
// readers run per frame.
func TestNoAllocations(t *testing.T) {
	in := []byte("\x82\xa4Item\xc4\x03abc\xa2id\xcf\x00\x00\x00\x00\x00\x00\x00\x07")
	allocs := testing.AllocsPerRun(100, func() {
		r := New(in, errKind)
		n, _ := r.MapLen()
		for range n {
			k, _ := r.Str()
			if string(k) == "Item" {
				_, _ = r.Bin()
			} else {
				_, _ = r.Uint()
			}
		}
		r = New(in, errKind)
		_ = r.Skip()
	})
	if allocs != 0 {
		t.Fatalf("%v allocations per read, want 0", allocs)
	}
}
