package frame

import (
	"bytes"
	"errors"
	"io"
	"testing"

	"github.com/velo-go/velo/ext"
)

// fuzzMax is the frame limit the fuzz targets decode with.
const fuzzMax = 1 << 20

// fuzzSeeds are streams worth starting from: valid frames, cut frames, bad
// preambles and huge lengths.
func fuzzSeeds() [][]byte {
	valid := encodeAll([]ext.Frame{
		{Type: ext.Message, Header: []byte("hdr"), Payload: []byte("payload")},
		{Type: ext.Response},
		{Type: ext.Ack, Header: []byte{1}},
		{Type: ext.Event, Payload: pattern(300, 1)},
		{Type: ext.ShuttingDown, Header: []byte("echo")},
		{Type: ext.Message, Header: []byte("m2"), Payload: []byte("x")},
	})
	one := Append(nil, ext.Frame{Type: ext.Message, Header: []byte("h"), Payload: []byte("p")})
	return [][]byte{
		nil,
		{0},
		one,
		one[:PreambleLen-1],
		one[:PreambleLen],
		one[:len(one)-1],
		valid,
		valid[:len(valid)-5],
		append(append([]byte(nil), one...), rawPreamble(2, 0, 0, 0)...),
		rawPreamble(0, 0, 0, 0),
		rawPreamble(0x0101, 0, 0, 0),
		rawPreamble(1, 5, 0, 0),
		rawPreamble(1, 255, 1, 1),
		rawPreamble(1, 0, 0, fuzzMax),
		rawPreamble(1, 0, fuzzMax, 1),
		rawPreamble(1, 3, 1<<30, 0),
		rawPreamble(1, 1, 0xffffffff, 0xffffffff),
		rawPreamble(1, 1, 0xffffffff, 2),
		append(append([]byte(nil), one...), rawPreamble(1, 0, 0xffffffff, 0)...),
		Append(nil, ext.Frame{Type: ext.Event, Payload: pattern(70000, 2)}),
	}
}

// FuzzDecode: Decode never panics, and whatever it accepts re-encodes to
// exactly the bytes it consumed.
func FuzzDecode(f *testing.F) {
	for _, s := range fuzzSeeds() {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		fr, n, err := Decode(b, fuzzMax)
		var perr error
		if len(b) >= PreambleLen {
			_, perr = ParsePreamble(b, fuzzMax)
		}
		if (err == nil) != (perr == nil) {
			t.Fatalf("Decode err %v but ParsePreamble err %v", err, perr)
		}
		if err != nil {
			if n != 0 || fr.Header != nil || fr.Payload != nil {
				t.Fatalf("Decode returned n %d and a frame with err %v", n, err)
			}
			malformed, tooLarge := errors.Is(err, ErrMalformed), errors.Is(err, ext.ErrFrameTooLarge)
			if malformed == tooLarge {
				t.Fatalf("Decode err %v: malformed %v, too large %v; want exactly one", err, malformed, tooLarge)
			}
			if malformed != errors.Is(perr, ErrMalformed) {
				t.Fatalf("Decode err %v, ParsePreamble err %v", err, perr)
			}
			var tl *ext.FrameTooLargeError
			if tooLarge && (!errors.As(err, &tl) || tl.Max != fuzzMax || tl.Size <= fuzzMax) {
				t.Fatalf("too large error %#v", tl)
			}
			return
		}
		if n == 0 {
			if len(b) >= PreambleLen {
				p, _ := ParsePreamble(b, fuzzMax)
				if p.FrameLen() <= len(b) {
					t.Fatalf("Decode waits for more bytes but the %d-byte frame is in %d bytes", p.FrameLen(), len(b))
				}
			}
			return
		}
		if n > len(b) || n < PreambleLen {
			t.Fatalf("n %d with %d bytes", n, len(b))
		}
		if len(fr.Header)+len(fr.Payload) != n-PreambleLen || fr.Len() > fuzzMax {
			t.Fatalf("header %d + payload %d != n %d - %d", len(fr.Header), len(fr.Payload), n, PreambleLen)
		}
		if !fr.Type.Valid() || fr.Owner != nil {
			t.Fatalf("bad frame type %d or owner %v", fr.Type, fr.Owner)
		}
		if enc := Append(nil, fr); !bytes.Equal(enc, b[:n]) {
			t.Fatalf("re-encoded % x, want % x", enc, b[:n])
		}
		if enc := append(AppendPrefix(nil, fr), fr.Payload...); !bytes.Equal(enc, b[:n]) {
			t.Fatalf("AppendPrefix re-encoded % x, want % x", enc, b[:n])
		}
	})
}

// decodeStream is the reference: repeated Decode over the whole input. It
// returns the frames and what a Reader must end with.
func decodeStream(b []byte) ([]ext.Frame, error) {
	var fs []ext.Frame
	for {
		f, n, err := Decode(b, fuzzMax)
		if err != nil {
			return fs, err
		}
		if n == 0 {
			if len(b) == 0 {
				return fs, io.EOF
			}
			return fs, io.ErrUnexpectedEOF
		}
		fs = append(fs, f)
		b = b[n:]
	}
}

// fuzzPieces turns fuzz bytes into read sizes from 1 byte to about 256 KiB.
func fuzzPieces(sizes []byte) []int {
	out := make([]int, len(sizes))
	for i, s := range sizes {
		out[i] = 1 + int(s)*int(s)*4
	}
	return out
}

func sameEnd(got, want error) bool {
	switch {
	case errors.Is(want, ErrMalformed):
		return errors.Is(got, ErrMalformed)
	case errors.Is(want, ext.ErrFrameTooLarge):
		var g, w *ext.FrameTooLargeError
		return errors.As(got, &g) && errors.As(want, &w) && *g == *w
	}
	return got == want
}

// FuzzReader: a Reader fed the input in pieces of fuzzed sizes agrees with
// repeated Decode over the whole input, through Next and through
// AppendMessages, and the frames it returned keep their bytes to the end.
func FuzzReader(f *testing.F) {
	for i, s := range fuzzSeeds() {
		f.Add(s, []byte{})
		f.Add(s, []byte{0})
		f.Add(s, []byte{byte(i), 2, 255, 1})
	}
	f.Fuzz(func(t *testing.T, data, sizes []byte) {
		want, wantEnd := decodeStream(data)
		pieces := fuzzPieces(sizes)
		if len(pieces) == 0 {
			pieces = []int{len(data) + 1}
		}

		r := NewReader(&chunkedReader{data: data, sizes: pieces}, fuzzMax)
		got, end := readAll(r)
		if !sameEnd(end, wantEnd) {
			t.Fatalf("Next ended with %v, want %v", end, wantEnd)
		}
		checkFrames(t, got, want)

		r2 := NewReader(&chunkedReader{data: data, sizes: pieces}, fuzzMax)
		got2, end2 := collect(r2)
		if !sameEnd(end2, wantEnd) {
			t.Fatalf("AppendMessages path ended with %v, want %v", end2, wantEnd)
		}
		checkFrames(t, got2, want)
		// Frames from the first reader are still whole after the second ran.
		checkFrames(t, got, want)

		checkDirect(t, data, pieces, want, wantEnd)

		releaseAll(got)
		r.Close()
		r2.Close()
		releaseAll(got2)
	})
}

// checkDirect reads the stream with a Direct hook that takes every payload
// it is offered: the frames it took and those Next gave, in order, are the
// stream's frames, and the stream ends the same way.
func checkDirect(t *testing.T, data []byte, pieces []int, want []ext.Frame, wantEnd error) {
	t.Helper()
	r := NewReader(&chunkedReader{data: data, sizes: pieces}, fuzzMax)
	r.directMin = 1
	var got []ext.Frame
	pending := false
	r.Direct = func(typ ext.MessageType, header []byte, n int) ([]byte, func(error)) {
		if pending {
			t.Fatal("Direct asked again before the last payload was done")
		}
		pending = true
		f := ext.Frame{Type: typ, Header: bytes.Clone(header), Payload: make([]byte, n)}
		return f.Payload, func(err error) {
			pending = false
			if err == nil {
				got = append(got, f)
			}
		}
	}
	var end error
	for {
		f, err := r.Next()
		if err != nil {
			end = err
			break
		}
		got = append(got, ext.Frame{Type: f.Type, Header: bytes.Clone(f.Header), Payload: bytes.Clone(f.Payload)})
		f.Release()
	}
	r.Close()
	if pending {
		t.Fatal("a direct payload was never done")
	}
	if !sameEnd(end, wantEnd) {
		t.Fatalf("the direct path ended with %v, want %v", end, wantEnd)
	}
	if len(got) != len(want) {
		t.Fatalf("the direct path gave %d frames, want %d", len(got), len(want))
	}
	for i := range got {
		if !sameFrame(got[i], want[i]) {
			t.Fatalf("the direct path's frame %d differs", i)
		}
	}
}
