package rdmapath

import (
	"bytes"
	"encoding/hex"
	"errors"
	"strings"
	"testing"
)

// The golden vectors are built by hand from the book's layout (the
// reference has no descriptor test vectors to take them from): every
// multi-byte field little-endian, in the order backend, version, flags,
// generation, addr, len, rkey_len, rkey.
var golden = []struct {
	name string
	d    Descriptor
	hex  string
}{
	{
		"small", Descriptor{Backend: 1, Generation: 7, Addr: 0x7f00_0000_1000, Len: 65536, Rkey: []byte{0xaa, 0xbb, 0xcc}},
		"01" + "01" + "00" +
			"0700000000000000" +
			"00100000007f0000" +
			"0000010000000000" +
			"0300" + "aabbcc",
	},
	{
		"every byte distinct", Descriptor{Backend: 1, Generation: 0x0102030405060708, Addr: 0x1112131415161718, Len: 0x2122232425262728, Rkey: []byte{0xff}},
		"010100" + "0807060504030201" + "1817161514131211" + "2827262524232221" + "0100" + "ff",
	},
	{
		"longest key", Descriptor{Backend: 1, Addr: 0, Len: 1, Rkey: bytes.Repeat([]byte{0x5a}, MaxRkeyLen)},
		"010100" + "0000000000000000" + "0000000000000000" + "0100000000000000" + "0010" + strings.Repeat("5a", MaxRkeyLen),
	},
}

func TestDescriptorGolden(t *testing.T) {
	for _, g := range golden {
		want, err := hex.DecodeString(g.hex)
		if err != nil {
			t.Fatal(err)
		}
		if len(want) != HeaderLen+len(g.d.Rkey) {
			t.Fatalf("%s: the vector is %d bytes, want %d", g.name, len(want), HeaderLen+len(g.d.Rkey))
		}
		got, err := g.d.Append(nil)
		if err != nil || !bytes.Equal(got, want) {
			t.Errorf("%s: Append = %x, %v; want %x", g.name, got, err, want)
		}
		d, err := Decode(want)
		if err != nil || d.Backend != g.d.Backend || d.Generation != g.d.Generation || d.Addr != g.d.Addr || d.Len != g.d.Len || !bytes.Equal(d.Rkey, g.d.Rkey) {
			t.Errorf("%s: Decode = %+v, %v", g.name, d, err)
		}
	}
}

// valid is a good descriptor's bytes, for the refusals to break one field each.
func valid(t testing.TB) []byte {
	b, err := (&Descriptor{Backend: 1, Generation: 3, Addr: 0x1000, Len: 4096, Rkey: []byte{1, 2, 3, 4}}).Append(nil)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func TestDecodeRefusals(t *testing.T) {
	edit := func(f func(b []byte) []byte) []byte { return f(valid(t)) }
	cases := []struct {
		name string
		b    []byte
		want error
	}{
		{"empty", nil, ErrDescriptorShort},
		{"header minus one", valid(t)[:HeaderLen-1], ErrDescriptorShort},
		{"backend 0", edit(func(b []byte) []byte { b[0] = 0; return b }), ErrUnknownBackend},
		{"backend 2", edit(func(b []byte) []byte { b[0] = 2; return b }), ErrUnknownBackend},
		{"version 0", edit(func(b []byte) []byte { b[1] = 0; return b }), ErrUnknownVersion},
		{"version 2", edit(func(b []byte) []byte { b[1] = 2; return b }), ErrUnknownVersion},
		{"flags", edit(func(b []byte) []byte { b[2] = 1; return b }), ErrFlags},
		{"flags high bit", edit(func(b []byte) []byte { b[2] = 0x80; return b }), ErrFlags},
		{"zero len", edit(func(b []byte) []byte { clear(b[19:27]); return b }), ErrZeroLen},
		{"wrapping range", edit(func(b []byte) []byte { b[18] = 0xff; b[26] = 0xff; return b }), ErrAddrRange},
		{"truncated key", edit(func(b []byte) []byte { return b[:len(b)-1] }), ErrRkeyLen},
		{"trailing byte", edit(func(b []byte) []byte { return append(b, 0) }), ErrRkeyLen},
		{"rkey_len over the bytes", edit(func(b []byte) []byte { b[27] = 0xff; return b }), ErrRkeyLen},
		{"empty key", edit(func(b []byte) []byte { b[27], b[28] = 0, 0; return b[:HeaderLen] }), ErrRkeyEmpty},
		{"key over the bound", func() []byte {
			b := valid(t)[:27]
			b = append(b, 0x01, 0x10) // 4097
			return append(b, make([]byte, MaxRkeyLen+1)...)
		}(), ErrRkeyTooLong},
	}
	for _, c := range cases {
		_, err := Decode(c.b)
		if !errors.Is(err, c.want) || !errors.Is(err, ErrBadDescriptor) {
			t.Errorf("%s: Decode = %v, want %v", c.name, err, c.want)
		}
	}
}

// Append refuses what Decode refuses, and writes nothing when it does.
func TestAppendRefusals(t *testing.T) {
	ok := Descriptor{Backend: 1, Addr: 1, Len: 1, Rkey: []byte{1}}
	cases := []struct {
		name string
		mod  func(d *Descriptor)
		want error
	}{
		{"backend", func(d *Descriptor) { d.Backend = 9 }, ErrUnknownBackend},
		{"zero len", func(d *Descriptor) { d.Len = 0 }, ErrZeroLen},
		{"wrap", func(d *Descriptor) { d.Addr, d.Len = ^uint64(0), 2 }, ErrAddrRange},
		{"empty key", func(d *Descriptor) { d.Rkey = nil }, ErrRkeyEmpty},
		{"long key", func(d *Descriptor) { d.Rkey = make([]byte, MaxRkeyLen+1) }, ErrRkeyTooLong},
	}
	for _, c := range cases {
		d := ok
		c.mod(&d)
		out, err := d.Append([]byte{0xee})
		if !errors.Is(err, c.want) || len(out) != 1 {
			t.Errorf("%s: Append = %x, %v; want %v and nothing written", c.name, out, err, c.want)
		}
	}
	// The range may end exactly at the top of the address space.
	top := Descriptor{Backend: 1, Addr: ^uint64(0) - 9, Len: 10, Rkey: []byte{1}}
	if _, err := top.Append(nil); err != nil {
		t.Errorf("a range ending at 2^64: %v", err)
	}
}

// Decode of a fresh buffer does not allocate: it runs on every Rdma answer.
func TestDecodeAllocs(t *testing.T) {
	b := valid(t)
	if n := testing.AllocsPerRun(100, func() { _, _ = Decode(b) }); n != 0 {
		t.Errorf("Decode: %v allocs, want 0", n)
	}
}

// FuzzDecode: Decode never panics; what it accepts re-encodes to the same
// bytes (so it accepts only what Append could have written), and what
// Append writes decodes to the same descriptor.
func FuzzDecode(f *testing.F) {
	for _, g := range golden[:2] {
		b, _ := hex.DecodeString(g.hex)
		f.Add(b)
	}
	f.Add(valid(f))
	f.Add(valid(f)[:HeaderLen])
	f.Add(append(valid(f), 0))
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, b []byte) {
		d, err := Decode(b)
		if err != nil {
			if !errors.Is(err, ErrBadDescriptor) {
				t.Fatalf("refusal %v does not match ErrBadDescriptor", err)
			}
			return
		}
		out, err := d.Append(nil)
		if err != nil || !bytes.Equal(out, b) {
			t.Fatalf("accepted %x, which re-encodes to %x (%v)", b, out, err)
		}
		d2, err := Decode(out)
		if err != nil || d2.Generation != d.Generation || d2.Addr != d.Addr || d2.Len != d.Len || !bytes.Equal(d2.Rkey, d.Rkey) {
			t.Fatalf("round trip: %+v, %v; want %+v", d2, err, d)
		}
	})
}
