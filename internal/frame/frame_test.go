package frame

import (
	"bytes"
	"encoding/binary"
	"errors"
	"math"
	"strconv"
	"testing"

	"github.com/velo-go/velo/ext"
)

// pattern returns n bytes of a pattern that depends on seed, so that frames of
// the same size still differ.
func pattern(n int, seed byte) []byte {
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(i*7) + seed
	}
	return b
}

// rawPreamble builds a preamble by hand, with any field value.
func rawPreamble(version uint16, typ byte, headerLen, payloadLen uint32) []byte {
	b := make([]byte, PreambleLen)
	binary.BigEndian.PutUint16(b[0:], version)
	b[2] = typ
	binary.BigEndian.PutUint32(b[3:], headerLen)
	binary.BigEndian.PutUint32(b[7:], payloadLen)
	return b
}

func sameFrame(a, b ext.Frame) bool {
	return a.Type == b.Type && bytes.Equal(a.Header, b.Header) && bytes.Equal(a.Payload, b.Payload)
}

func TestPutPreambleExactBytes(t *testing.T) {
	var p [PreambleLen]byte
	PutPreamble(p[:], ext.Event, 0x01020304, 0x0a0b0c0d)
	want := []byte{0x00, 0x01, 0x03, 0x01, 0x02, 0x03, 0x04, 0x0a, 0x0b, 0x0c, 0x0d}
	if !bytes.Equal(p[:], want) {
		t.Fatalf("PutPreamble = % x, want % x", p[:], want)
	}
}

func TestAppendExactBytes(t *testing.T) {
	f := ext.Frame{Type: ext.Response, Header: []byte("hd"), Payload: []byte("pay")}
	want := []byte{
		0x00, 0x01, // schema version 1
		0x01,                   // Response
		0x00, 0x00, 0x00, 0x02, // header_len
		0x00, 0x00, 0x00, 0x03, // payload_len
		'h', 'd',
		'p', 'a', 'y',
	}
	if got := Append(nil, f); !bytes.Equal(got, want) {
		t.Fatalf("Append = % x, want % x", got, want)
	}
	// Appending after existing bytes keeps them, with and without spare capacity.
	for _, c := range []int{2, 100} {
		dst := make([]byte, 2, c)
		dst[0], dst[1] = 0xee, 0xff
		got := Append(dst, f)
		if !bytes.Equal(got[:2], []byte{0xee, 0xff}) || !bytes.Equal(got[2:], want) {
			t.Fatalf("Append(cap %d) = % x", c, got)
		}
	}
	if got, want := AppendPrefix([]byte{0xaa}, f), append([]byte{0xaa}, want[:PreambleLen+2]...); !bytes.Equal(got, want) {
		t.Fatalf("AppendPrefix = % x, want % x", got, want)
	}
	// An empty frame is a bare preamble.
	if got := Append(nil, ext.Frame{Type: ext.ShuttingDown}); !bytes.Equal(got, []byte{0, 1, 4, 0, 0, 0, 0, 0, 0, 0, 0}) {
		t.Fatalf("Append(empty) = % x", got)
	}
}

// TestAppendGrowsAtMostOnce: Append's doc promises one growth at most.
func TestAppendGrowsAtMostOnce(t *testing.T) {
	if raceEnabled {
		t.Skip("the race detector disables the append-of-make rewrite")
	}
	f := ext.Frame{Type: ext.Message, Header: pattern(100, 1), Payload: pattern(5000, 2)}
	dst := make([]byte, 0, 16)
	if n := testing.AllocsPerRun(100, func() { _ = Append(dst, f) }); n > 1 {
		t.Fatalf("Append allocated %v times, want at most 1", n)
	}
	big := make([]byte, 0, 8192)
	if n := testing.AllocsPerRun(100, func() { _ = Append(big, f) }); n != 0 {
		t.Fatalf("Append with room allocated %v times, want 0", n)
	}
}

func TestCheckSize(t *testing.T) {
	f := ext.Frame{Header: make([]byte, 3), Payload: make([]byte, 7)}
	if err := CheckSize(f, 10); err != nil {
		t.Fatalf("CheckSize at the limit: %v", err)
	}
	err := CheckSize(f, 9)
	var tl *ext.FrameTooLargeError
	if !errors.Is(err, ext.ErrFrameTooLarge) || !errors.As(err, &tl) || tl.Size != 10 || tl.Max != 9 {
		t.Fatalf("CheckSize over the limit = %v", err)
	}
}

const u32 = math.MaxUint32

// is64 reports whether an int holds every sum of two u32 lengths.
const is64 = strconv.IntSize == 64

var roundTripSizes = []int{0, 1, 2, 10, 11, 12, 255, 256, 4095, 4096, 65535 - PreambleLen, 65535, 65536, 65537, 65536 + PreambleLen, 131072 + 3}

func TestDecodeRoundTrip(t *testing.T) {
	var seed byte
	for typ := ext.MessageType(0); typ.Valid(); typ++ {
		for _, hl := range []int{0, 1, 37, 65536} {
			for _, pl := range roundTripSizes {
				seed++
				f := ext.Frame{Type: typ, Header: pattern(hl, seed), Payload: pattern(pl, seed+100)}
				enc := Append(nil, f)
				if len(enc) != PreambleLen+hl+pl {
					t.Fatalf("encoded %d bytes, want %d", len(enc), PreambleLen+hl+pl)
				}
				// Trailing bytes of a next frame must not be consumed.
				withTail := append(enc[:len(enc):len(enc)], 0x00, 0x01, 0x02)
				for _, b := range [][]byte{enc, withTail} {
					got, n, err := Decode(b, DefaultMaxFrame)
					if err != nil || n != len(enc) {
						t.Fatalf("Decode(%v h=%d p=%d) = n %d err %v, want n %d", typ, hl, pl, n, err, len(enc))
					}
					if !sameFrame(got, f) {
						t.Fatalf("Decode(%v h=%d p=%d): frame differs", typ, hl, pl)
					}
					if got.Owner != nil {
						t.Fatalf("Decode set an Owner")
					}
					// The slices alias b and are capped, so appending to one cannot clobber the other.
					if len(got.Header) != cap(got.Header) || len(got.Payload) != cap(got.Payload) {
						t.Fatalf("Decode slices not capped: header %d/%d payload %d/%d",
							len(got.Header), cap(got.Header), len(got.Payload), cap(got.Payload))
					}
					if pl > 0 && &got.Payload[0] != &b[PreambleLen+hl] {
						t.Fatalf("payload does not alias the input")
					}
				}
				p, err := ParsePreamble(enc, DefaultMaxFrame)
				if err != nil || p != (Preamble{Type: typ, HeaderLen: hl, PayloadLen: pl}) || p.FrameLen() != len(enc) {
					t.Fatalf("ParsePreamble = %+v, %v", p, err)
				}
			}
		}
	}
}

// TestDecodeExactMax: header plus payload equal to max is accepted; one more is refused.
func TestDecodeExactMax(t *testing.T) {
	const max = 1000
	enc := Append(nil, ext.Frame{Type: ext.Ack, Header: pattern(400, 1), Payload: pattern(600, 2)})
	if _, n, err := Decode(enc, max); err != nil || n != len(enc) {
		t.Fatalf("Decode at max = n %d err %v", n, err)
	}
	_, n, err := Decode(enc, max-1)
	var tl *ext.FrameTooLargeError
	if n != 0 || !errors.As(err, &tl) || tl.Size != max || tl.Max != max-1 {
		t.Fatalf("Decode over max = n %d err %v", n, err)
	}
}

func TestDecodeProperPrefixes(t *testing.T) {
	frames := []ext.Frame{
		{Type: ext.Message},
		{Type: ext.Event, Header: []byte("h")},
		{Type: ext.Response, Payload: []byte("p")},
		{Type: ext.ShuttingDown, Header: pattern(300, 3), Payload: pattern(70000, 4)},
	}
	for _, f := range frames {
		enc := Append(nil, f)
		for i := 0; i < len(enc); i++ {
			got, n, err := Decode(enc[:i], DefaultMaxFrame)
			if n != 0 || err != nil || got.Type != 0 || got.Header != nil || got.Payload != nil || got.Owner != nil {
				t.Fatalf("Decode(prefix %d of %d) = %+v, n %d, err %v; want zero frame, 0, nil", i, len(enc), got, n, err)
			}
		}
	}
}

func TestParsePreambleRejects(t *testing.T) {
	cases := []struct {
		name string
		b    []byte
	}{
		{"version 0", rawPreamble(0, 0, 0, 0)},
		{"version 2", rawPreamble(2, 0, 0, 0)},
		{"version 0x0101", rawPreamble(0x0101, 0, 0, 0)},
		{"version 0xffff", rawPreamble(0xffff, 0, 0, 0)},
		{"type 5", rawPreamble(1, 5, 0, 0)},
		{"type 255", rawPreamble(1, 255, 0, 0)},
		{"short", rawPreamble(1, 0, 0, 0)[:PreambleLen-1]},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			if _, err := ParsePreamble(c.b, DefaultMaxFrame); !errors.Is(err, ErrMalformed) {
				t.Fatalf("ParsePreamble = %v, want ErrMalformed", err)
			} else if errors.Is(err, ext.ErrFrameTooLarge) {
				t.Fatalf("malformed preamble also matches ErrFrameTooLarge: %v", err)
			}
			if len(c.b) < PreambleLen {
				return // Decode waits for more bytes
			}
			// Decode must refuse it too, with or without the rest of the frame.
			for _, b := range [][]byte{c.b, append(append([]byte(nil), c.b...), make([]byte, 64)...)} {
				if f, n, err := Decode(b, DefaultMaxFrame); n != 0 || !errors.Is(err, ErrMalformed) || f.Header != nil {
					t.Fatalf("Decode = n %d err %v, want ErrMalformed", n, err)
				}
			}
		})
	}
}

func TestParsePreambleTooLarge(t *testing.T) {
	cases := []struct {
		h, p      uint32
		max, size uint64
	}{
		{DefaultMaxFrame, 1, DefaultMaxFrame, DefaultMaxFrame + 1},
		{0, DefaultMaxFrame + 1, DefaultMaxFrame, DefaultMaxFrame + 1},
		{1 << 30, 0, DefaultMaxFrame, 1 << 30},
		{u32, 0, DefaultMaxFrame, u32},
		{u32, 1, u32, 1 << 32}, // the sum does not fit a u32
		{u32, u32, DefaultMaxFrame, 2 * u32},
		{u32, u32, 2*u32 - 1, 2 * u32},
		{1, 0, 0, 1},
	}
	for _, c := range cases {
		if !is64 && (c.max > math.MaxInt32 || c.size > math.MaxInt32) {
			continue // neither fits an int here
		}
		max, size := int(c.max), int(c.size)
		for typ := ext.MessageType(0); typ.Valid(); typ++ {
			b := rawPreamble(1, byte(typ), c.h, c.p)
			check := func(what string, err error) {
				t.Helper()
				var tl *ext.FrameTooLargeError
				if !errors.Is(err, ext.ErrFrameTooLarge) || !errors.As(err, &tl) {
					t.Fatalf("%s(h=%d p=%d max=%d) = %v, want *FrameTooLargeError", what, c.h, c.p, max, err)
				}
				if tl.Size != size || tl.Max != max {
					t.Fatalf("%s(h=%d p=%d max=%d): Size %d Max %d, want %d %d", what, c.h, c.p, max, tl.Size, tl.Max, size, max)
				}
				if errors.Is(err, ErrMalformed) {
					t.Fatalf("too large also matches ErrMalformed")
				}
			}
			_, err := ParsePreamble(b, max)
			check("ParsePreamble", err)
			_, n, err := Decode(b, max)
			if n != 0 {
				t.Fatalf("Decode consumed %d bytes of a refused frame", n)
			}
			check("Decode", err)
		}
	}
}

// TestLengthsNear4GiB: u32 lengths are summed without wrapping, so the
// largest announced lengths neither pass a small max nor turn negative.
func TestLengthsNear4GiB(t *testing.T) {
	// A sum that wraps a u32 (or a 32-bit int) to a small number is still
	// refused, on every platform.
	for _, l := range [][2]uint32{{u32, 2}, {2, u32}, {u32, u32}, {1 << 31, 1 << 31}, {u32 - 5, 10}} {
		b := append(rawPreamble(1, byte(ext.Event), l[0], l[1]), make([]byte, 64)...)
		if _, n, err := Decode(b, 16); n != 0 || !errors.Is(err, ext.ErrFrameTooLarge) {
			t.Fatalf("Decode(h=%d p=%d) = n %d err %v, want too large", l[0], l[1], n, err)
		}
		if _, err := ParsePreamble(b, 16); !errors.Is(err, ext.ErrFrameTooLarge) {
			t.Fatalf("ParsePreamble(h=%d p=%d) = %v, want too large", l[0], l[1], err)
		}
	}
	if !is64 {
		t.Skip("lengths past 2 GiB do not fit an int here")
	}
	big := uint64(u32) // not a constant, so that this compiles where int is 32 bits
	b := rawPreamble(1, byte(ext.Message), u32, u32)
	p, err := ParsePreamble(b, math.MaxInt)
	if err != nil {
		t.Fatalf("ParsePreamble with max MaxInt: %v", err)
	}
	if p.HeaderLen != int(big) || p.PayloadLen != int(big) || p.FrameLen() != PreambleLen+2*int(big) {
		t.Fatalf("ParsePreamble = %+v, FrameLen %d", p, p.FrameLen())
	}
	// Accepted but not yet whole: Decode waits.
	if _, n, err := Decode(b, math.MaxInt); n != 0 || err != nil {
		t.Fatalf("Decode with max MaxInt = n %d err %v, want 0 nil", n, err)
	}
	// Just under the u32 sum wrapping point, with a max one short.
	b = rawPreamble(1, byte(ext.Event), u32-10, 10)
	if _, n, err := Decode(b, int(big)-1); n != 0 || !errors.Is(err, ext.ErrFrameTooLarge) {
		t.Fatalf("Decode = n %d err %v, want too large", n, err)
	}
	if _, n, err := Decode(b, int(big)); n != 0 || err != nil {
		t.Fatalf("Decode at max = n %d err %v, want 0 nil", n, err)
	}
}

// TestParsePreambleDoesNotAllocate: its doc says it never allocates, which
// matters because it runs on every read of a large frame. Only the success
// path is held to that; errors are built with fmt.
func TestParsePreambleDoesNotAllocate(t *testing.T) {
	b := Append(nil, ext.Frame{Type: ext.Message, Header: []byte("h"), Payload: []byte("p")})
	if n := testing.AllocsPerRun(100, func() { _, _ = ParsePreamble(b, DefaultMaxFrame) }); n != 0 {
		t.Fatalf("ParsePreamble allocated %v times", n)
	}
	if n := testing.AllocsPerRun(100, func() { _, _, _ = Decode(b, DefaultMaxFrame) }); n != 0 {
		t.Fatalf("Decode allocated %v times", n)
	}
}

func TestMessageTypeValid(t *testing.T) {
	for v := 0; v < 256; v++ {
		b := rawPreamble(1, byte(v), 0, 0)
		_, err := ParsePreamble(b, DefaultMaxFrame)
		if (v <= int(ext.ShuttingDown)) != (err == nil) {
			t.Fatalf("type %d: err %v", v, err)
		}
	}
}
