package frame

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"math"
	"math/rand/v2"
	"runtime"
	"strings"
	"sync"
	"testing"
	"testing/iotest"

	"github.com/velo-go/velo/ext"
)

// chunkedReader hands out data in pieces whose sizes cycle through sizes
// (each at least 1), and io.EOF at the end.
type chunkedReader struct {
	data  []byte
	sizes []int
	i     int
}

func (c *chunkedReader) Read(p []byte) (int, error) {
	if len(c.data) == 0 {
		return 0, io.EOF
	}
	n := 1
	if len(c.sizes) > 0 {
		n = max(1, c.sizes[c.i%len(c.sizes)])
		c.i++
	}
	n = min(n, len(p), len(c.data))
	copy(p, c.data[:n])
	c.data = c.data[n:]
	return n, nil
}

// randomReader hands out data in pieces of random size in [1, maxPiece].
type randomReader struct {
	data     []byte
	rng      *rand.Rand
	maxPiece int
}

func (r *randomReader) Read(p []byte) (int, error) {
	if len(r.data) == 0 {
		return 0, io.EOF
	}
	n := min(1+r.rng.IntN(r.maxPiece), len(p), len(r.data))
	copy(p, r.data[:n])
	r.data = r.data[n:]
	return n, nil
}

// readCall is what a recordingReader saw of one Read call.
type readCall struct {
	offered   int // len(p)
	delivered int // bytes of the stream handed out before this call
}

// recordingReader wraps a reader and records every Read call.
type recordingReader struct {
	r         io.Reader
	delivered int
	calls     []readCall
}

func (r *recordingReader) Read(p []byte) (int, error) {
	r.calls = append(r.calls, readCall{offered: len(p), delivered: r.delivered})
	n, err := r.r.Read(p)
	r.delivered += n
	return n, err
}

// testFrames is a mixed stream: every type, empty parts, and sizes on both
// sides of the 64 KiB chunk.
func testFrames() []ext.Frame {
	var fs []ext.Frame
	sizes := []int{0, 1, 5, 100, 4000, 65536 - PreambleLen, 65536, 70000}
	seed := byte(0)
	for i, hl := range []int{0, 3, 64, 0, 1000} {
		for j, pl := range sizes {
			seed++
			typ := ext.MessageType((i + j) % ext.NumMessageTypes)
			fs = append(fs, ext.Frame{Type: typ, Header: pattern(hl, seed), Payload: pattern(pl, seed+50)})
		}
	}
	return fs
}

func encodeAll(fs []ext.Frame) []byte {
	var b []byte
	for _, f := range fs {
		b = Append(b, f)
	}
	return b
}

// readAll reads frames until an error and returns them with that error.
func readAll(r *Reader) ([]ext.Frame, error) {
	var fs []ext.Frame
	for {
		f, err := r.Next()
		if err != nil {
			return fs, err
		}
		fs = append(fs, f)
	}
}

func releaseAll(fs []ext.Frame) {
	for _, f := range fs {
		f.Release()
	}
}

func checkFrames(t *testing.T, got, want []ext.Frame) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("got %d frames, want %d", len(got), len(want))
	}
	for i := range want {
		if !sameFrame(got[i], want[i]) {
			t.Fatalf("frame %d: got type %v header %d payload %d bytes, want type %v header %d payload %d bytes (or contents differ)",
				i, got[i].Type, len(got[i].Header), len(got[i].Payload), want[i].Type, len(want[i].Header), len(want[i].Payload))
		}
		if _, ok := got[i].Owner.(*Chunk); !ok {
			t.Fatalf("frame %d: Owner is %T, want *Chunk", i, got[i].Owner)
		}
	}
}

// pieceReaders returns readers that deliver data in different ways.
func pieceReaders(data []byte) map[string]io.Reader {
	return map[string]io.Reader{
		"whole":        bytes.NewReader(data),
		"one byte":     iotest.OneByteReader(bytes.NewReader(data)),
		"half":         iotest.HalfReader(bytes.NewReader(data)),
		"data err":     iotest.DataErrReader(bytes.NewReader(data)),
		"7 bytes":      &chunkedReader{data: data, sizes: []int{7}},
		"11 bytes":     &chunkedReader{data: data, sizes: []int{PreambleLen}},
		"mixed pieces": &chunkedReader{data: data, sizes: []int{1, 7, 3, 4096, 10, 65536, 2, 200000}},
		"random 1":     &randomReader{data: data, rng: rand.New(rand.NewPCG(1, 2)), maxPiece: 100},
		"random 2":     &randomReader{data: data, rng: rand.New(rand.NewPCG(3, 4)), maxPiece: 10000},
		"random 3":     &randomReader{data: data, rng: rand.New(rand.NewPCG(5, 6)), maxPiece: 200000},
	}
}

// TestReaderPieces: however the stream is cut into reads, the same frames
// come out in order, and every frame still holds its bytes after the reader
// has read past it (they are compared only at the end).
func TestReaderPieces(t *testing.T) {
	want := testFrames()
	data := encodeAll(want)
	for name, src := range pieceReaders(data) {
		t.Run(name, func(t *testing.T) {
			r := NewReader(src, DefaultMaxFrame)
			got, err := readAll(r)
			if err != io.EOF {
				t.Fatalf("Next at the end = %v, want io.EOF", err)
			}
			checkFrames(t, got, want)
			releaseAll(got)
			r.Close()
		})
	}
}

func TestReaderLargeFrame(t *testing.T) {
	want := []ext.Frame{
		{Type: ext.Message, Header: []byte("before"), Payload: []byte("small")},
		{Type: ext.Event, Header: pattern(100, 9), Payload: pattern(9<<20, 10)},
		{Type: ext.Response, Header: []byte("after"), Payload: pattern(10, 11)},
		{Type: ext.Message, Payload: pattern(DefaultMaxFrame, 12)}, // exactly the max
	}
	data := encodeAll(want)
	readers := map[string]io.Reader{
		"whole":  bytes.NewReader(data),
		"pieces": &chunkedReader{data: data, sizes: []int{1, 7, 3, 4096, 10, 65536, 2, 1 << 20}},
		"random": &randomReader{data: data, rng: rand.New(rand.NewPCG(7, 8)), maxPiece: 300000},
	}
	for name, src := range readers {
		t.Run(name, func(t *testing.T) {
			r := NewReader(src, DefaultMaxFrame)
			got, err := readAll(r)
			if err != io.EOF {
				t.Fatalf("Next at the end = %v, want io.EOF", err)
			}
			checkFrames(t, got, want)
			releaseAll(got)
			r.Close()
		})
	}
}

func TestReaderEOF(t *testing.T) {
	// An empty stream ends cleanly at once.
	r := NewReader(bytes.NewReader(nil), DefaultMaxFrame)
	if _, err := r.Next(); err != io.EOF {
		t.Fatalf("Next on an empty stream = %v, want io.EOF", err)
	}
	r.Close()

	frames := []ext.Frame{
		{Type: ext.Message, Header: []byte("abc"), Payload: []byte("defgh")},
		{Type: ext.Ack},
		{Type: ext.Event, Header: []byte("x"), Payload: pattern(30, 1)},
	}
	data := encodeAll(frames)
	ends := map[int]int{} // stream length -> frames whole in it
	off := 0
	for i, f := range frames {
		ends[off] = i
		off += PreambleLen + f.Len()
	}
	ends[off] = len(frames)
	// Cut the stream at every byte: a cut between frames is a clean end,
	// any other is an unexpected one.
	for cut := 0; cut <= len(data); cut++ {
		for _, pieces := range []string{"whole", "one byte"} {
			var src io.Reader = bytes.NewReader(data[:cut])
			if pieces == "one byte" {
				src = iotest.OneByteReader(src)
			}
			r := NewReader(src, DefaultMaxFrame)
			got, err := readAll(r)
			whole, clean := ends[cut]
			if !clean {
				whole = 0
				for off, n := range ends {
					if off < cut && n > whole {
						whole = n
					}
				}
			}
			wantErr := io.ErrUnexpectedEOF
			if clean {
				wantErr = io.EOF
			}
			if err != wantErr {
				t.Fatalf("cut %d (%s): err %v, want %v", cut, pieces, err, wantErr)
			}
			checkFrames(t, got, frames[:whole])
			releaseAll(got)
			r.Close()
		}
	}
}

// errAfterReader returns its data, then err.
type errAfterReader struct {
	data []byte
	err  error
}

func (e *errAfterReader) Read(p []byte) (int, error) {
	if len(e.data) == 0 {
		return 0, e.err
	}
	n := copy(p, e.data)
	e.data = e.data[n:]
	return n, nil
}

func TestReaderReadError(t *testing.T) {
	boom := errors.New("boom")
	f := ext.Frame{Type: ext.Message, Header: []byte("h"), Payload: []byte("p")}
	data := Append(nil, f)
	for _, cut := range []int{len(data), len(data) + 3} {
		stream := append(append([]byte(nil), data...), data[:cut-len(data)]...)
		r := NewReader(&errAfterReader{data: stream, err: boom}, DefaultMaxFrame)
		got, err := readAll(r)
		if !errors.Is(err, boom) {
			t.Fatalf("cut %d: err %v, want the read error", cut, err)
		}
		checkFrames(t, got, []ext.Frame{f})
		releaseAll(got)
		r.Close()
	}
}

func TestReaderMalformed(t *testing.T) {
	good := ext.Frame{Type: ext.Response, Header: []byte("ok"), Payload: pattern(500, 1)}
	bad := map[string][]byte{
		"version 0":   rawPreamble(0, 0, 0, 0),
		"version 2":   rawPreamble(2, 0, 1, 1),
		"version ff":  rawPreamble(0xffff, 0, 0, 0),
		"type 5":      rawPreamble(1, 5, 0, 0),
		"type 255":    rawPreamble(1, 255, 2, 2),
		"ascii junk":  []byte("GET / HTTP/1.1\r\n\r\n"),
		"all ones 11": bytes.Repeat([]byte{0xff}, PreambleLen),
	}
	for name, b := range bad {
		data := append(Append(Append(nil, good), good), b...)
		data = append(data, make([]byte, 20)...)
		for pname, src := range map[string]io.Reader{
			"whole":    bytes.NewReader(data),
			"one byte": iotest.OneByteReader(bytes.NewReader(data)),
		} {
			t.Run(name+"/"+pname, func(t *testing.T) {
				r := NewReader(src, DefaultMaxFrame)
				got, err := readAll(r)
				if !errors.Is(err, ErrMalformed) {
					t.Fatalf("err %v, want ErrMalformed", err)
				}
				checkFrames(t, got, []ext.Frame{good, good})
				releaseAll(got)
				r.Close()
			})
		}
	}
}

// TestReaderTooLargeAllocatesNothing: a preamble that announces 1 GiB (or
// 8 GiB) over a 16 MiB max is refused before any room is made for it. A
// peer must not be able to make us allocate with 11 bytes.
func TestReaderTooLargeAllocatesNothing(t *testing.T) {
	prefix := Append(nil, ext.Frame{Type: ext.Message, Header: []byte("h"), Payload: []byte("p")})
	cases := []struct {
		name string
		h, p uint32
	}{
		{"1 GiB payload", 0, 1 << 30},
		{"1 GiB header", 1 << 30, 0},
		{"max plus one", 0, DefaultMaxFrame + 1},
		{"u32 max both", 1<<32 - 1, 1<<32 - 1},
	}
	for _, c := range cases {
		for _, split := range []bool{false, true} {
			t.Run(fmt.Sprintf("%s/split=%v", c.name, split), func(t *testing.T) {
				data := append(append([]byte(nil), prefix...), rawPreamble(1, byte(ext.Event), c.h, c.p)...)
				data = append(data, make([]byte, 100)...)
				var src io.Reader = bytes.NewReader(data)
				if split {
					src = &chunkedReader{data: data, sizes: []int{len(prefix) + 5, 3, 1, 1000}}
				}
				var before, after runtime.MemStats
				runtime.ReadMemStats(&before)
				r := NewReader(src, DefaultMaxFrame)
				got, err := readAll(r)
				runtime.ReadMemStats(&after)
				if alloc := after.TotalAlloc - before.TotalAlloc; alloc > 2<<20 {
					t.Fatalf("refusing the frame allocated %d bytes", alloc)
				}
				var tl *ext.FrameTooLargeError
				if !errors.Is(err, ext.ErrFrameTooLarge) || !errors.As(err, &tl) {
					t.Fatalf("err %v, want *FrameTooLargeError", err)
				}
				// Where an int has 32 bits the size saturates.
				wantSize := min(uint64(c.h)+uint64(c.p), math.MaxInt)
				if uint64(tl.Size) != wantSize || tl.Max != DefaultMaxFrame {
					t.Fatalf("Size %d Max %d, want %d %d", tl.Size, tl.Max, wantSize, DefaultMaxFrame)
				}
				if len(got) != 1 {
					t.Fatalf("got %d frames before the refused one, want 1", len(got))
				}
				releaseAll(got)
				r.Close()
			})
		}
	}
}

// largeFrames is a stream of frames on both sides of the read sizes, two
// of them 8 MiB, one starting part-way into a chunk.
func largeFrames() []ext.Frame {
	return []ext.Frame{
		{Type: ext.Message, Header: pattern(20, 1), Payload: pattern(8<<20, 2)},
		{Type: ext.Response, Header: []byte("small"), Payload: pattern(3000, 3)},
		{Type: ext.Event, Header: pattern(5, 4), Payload: pattern(8<<20, 5)},
		{Type: ext.Ack, Payload: pattern(100000, 6)},
		{Type: ext.Message, Payload: pattern(65536, 7)},
	}
}

// TestReaderReservesOnlyAStepBeyondTheBytesInHand: a preamble is a promise,
// not a reservation. While a frame is in progress, no read is offered more
// room than twice the larger of the bytes of the frame in hand and 128 KiB
// (the step ahead, rounded up to a chunk). The old reader made room for the
// whole announced frame as soon as it had the preamble: 32 connections that
// sent a preamble of a 16 MiB frame and nothing else held 1 GiB.
func TestReaderReservesOnlyAStepBeyondTheBytesInHand(t *testing.T) {
	frames := largeFrames()
	data := encodeAll(frames)
	sources := map[string]func() io.Reader{
		"whole":         func() io.Reader { return bytes.NewReader(data) },
		"preamble only": func() io.Reader { return &chunkedReader{data: data, sizes: []int{PreambleLen, 1 << 30}} },
		"tiny first":    func() io.Reader { return &chunkedReader{data: data, sizes: []int{1, 7, 2, 1 << 30}} },
		"pieces": func() io.Reader {
			return &chunkedReader{data: data, sizes: []int{7, 7, 7, 64 << 10, 1, 3, 100, 1 << 20, 13}}
		},
		"random": func() io.Reader {
			return &randomReader{data: data, rng: rand.New(rand.NewPCG(11, 12)), maxPiece: 1 << 20}
		},
	}
	for name, src := range sources {
		t.Run(name, func(t *testing.T) {
			rec := &recordingReader{r: src()}
			r := NewReader(rec, DefaultMaxFrame)
			got, err := readAll(r)
			if err != io.EOF {
				t.Fatalf("err %v, want io.EOF", err)
			}
			checkFrames(t, got, frames)
			start := 0
			for i, f := range frames {
				end := start + PreambleLen + f.Len()
				for _, c := range rec.calls {
					if c.delivered < start || c.delivered >= end {
						continue
					}
					inHand := c.delivered - start
					if limit := 2 * max(2*inHand, maxReadChunk); c.offered > limit {
						t.Fatalf("frame %d (%d bytes): with %d bytes of it in hand, a read was offered %d bytes, want at most %d",
							i, end-start, inHand, c.offered, limit)
					}
				}
				start = end
			}
			releaseAll(got)
			r.Close()
		})
	}
}

// TestReaderAPreambleAloneCostsOneSmallChunk: a reader that has only the
// preamble of a 16 MiB frame waits for the rest in a chunk of 64 KiB.
func TestReaderAPreambleAloneCostsOneSmallChunk(t *testing.T) {
	rec := &recordingReader{r: bytes.NewReader(rawPreamble(1, byte(ext.Message), 0, DefaultMaxFrame))}
	r := NewReader(rec, DefaultMaxFrame)
	if _, err := r.Next(); err != io.ErrUnexpectedEOF {
		t.Fatalf("err %v, want io.ErrUnexpectedEOF", err)
	}
	if got := r.BufferSize(); got > stepAhead {
		t.Fatalf("waiting for a 16 MiB frame with its preamble in hand, the reader holds %d bytes, want at most %d", got, stepAhead)
	}
	if c := rec.calls[len(rec.calls)-1]; c.offered > stepAhead {
		t.Fatalf("the read after the preamble was offered %d bytes, want at most %d", c.offered, stepAhead)
	}
	r.Close()
}

// TestReaderGrowsALargeFrameGeometrically: growing as the bytes arrive must
// not turn into regrowing by a fixed step, which copies the frame over and
// over (the book measured an 8 MiB round trip at 6.46 ms that way, against
// 4.70 ms with the frame read in place). With a sender that fills every
// read, an 8 MiB frame takes a handful of reads, one per doubling.
func TestReaderGrowsALargeFrameGeometrically(t *testing.T) {
	f := ext.Frame{Type: ext.Message, Header: pattern(20, 1), Payload: pattern(8<<20, 2)}
	rec := &recordingReader{r: bytes.NewReader(Append(nil, f))}
	r := NewReader(rec, DefaultMaxFrame)
	got, err := readAll(r)
	if err != io.EOF || len(got) != 1 || !sameFrame(got[0], f) {
		t.Fatalf("got %d frames, err %v", len(got), err)
	}
	// 4 KiB, 64 KiB, then doubling to 8 MiB: 9 chunks, plus the read that
	// sees io.EOF. A step of 64 KiB would take 128 reads.
	if n := len(rec.calls); n > 12 {
		t.Fatalf("reading one 8 MiB frame took %d reads, want at most 12", n)
	}
	copied := 0
	for _, c := range rec.calls[1:] {
		copied += c.delivered // what a move before this read could copy at most
	}
	t.Logf("%d reads; bytes in hand summed over the reads: %d", len(rec.calls), copied)
	releaseAll(got)
	r.Close()
}

// TestAnIdleReaderHoldsASmallChunk: a new reader waits in a 4 KiB chunk, and
// so does one that caught up after a burst of full reads: the burst's
// 128 KiB chunk goes back to its pool rather than sitting under an idle
// connection.
func TestAnIdleReaderHoldsASmallChunk(t *testing.T) {
	small := Append(nil, ext.Frame{Type: ext.Message, Header: []byte("h"), Payload: pattern(40, 1)})
	r := NewReader(&chunkedReader{data: small, sizes: []int{len(small)}}, DefaultMaxFrame)
	if _, err := r.Next(); err != nil {
		t.Fatal(err)
	}
	if got := r.BufferSize(); got != minChunk {
		t.Fatalf("a new reader reads into %d bytes, want %d", got, minChunk)
	}
	r.Close()

	var burst []byte
	for len(burst) < 2<<20 {
		burst = Append(burst, ext.Frame{Type: ext.Message, Payload: pattern(1000, 2)})
	}
	// Full reads through the burst, then one short read of the last frame.
	r = NewReader(io.MultiReader(bytes.NewReader(burst), bytes.NewReader(small)), DefaultMaxFrame)
	big := 0
	for {
		f, err := r.Next()
		if err != nil {
			t.Fatal(err)
		}
		big = max(big, r.BufferSize())
		f.Release()
		if len(f.Payload) == 40 {
			break
		}
	}
	if big != maxReadChunk {
		t.Fatalf("the burst was read into at most %d bytes, want %d", big, maxReadChunk)
	}
	// The next read is the one an idle connection waits in.
	if _, err := r.Next(); err != io.EOF {
		t.Fatalf("err %v, want io.EOF", err)
	}
	if got := r.BufferSize(); got != minChunk {
		t.Fatalf("after the burst, the caught-up reader waits in %d bytes, want %d", got, minChunk)
	}
	r.Close()
}

func TestReaderTryNextAndBuffered(t *testing.T) {
	frames := []ext.Frame{
		{Type: ext.Message, Header: []byte("a")},
		{Type: ext.Event, Payload: []byte("b")},
		{Type: ext.Ack, Header: []byte("c"), Payload: []byte("d")},
	}
	data := encodeAll(frames)
	data = append(data, Append(nil, ext.Frame{Type: ext.Response, Payload: []byte("tail")})[:PreambleLen+2]...)
	rec := &recordingReader{r: bytes.NewReader(data)}
	r := NewReader(rec, DefaultMaxFrame)
	defer r.Close()
	if r.Buffered() {
		t.Fatalf("Buffered before any read")
	}
	if _, ok, err := r.TryNext(); ok || err != nil {
		t.Fatalf("TryNext before any read = ok %v err %v", ok, err)
	}
	if len(rec.calls) != 0 {
		t.Fatalf("TryNext read from the source")
	}
	f0, err := r.Next()
	if err != nil {
		t.Fatal(err)
	}
	reads := len(rec.calls)
	var got = []ext.Frame{f0}
	for {
		if !r.Buffered() {
			t.Fatalf("Buffered false with bytes left")
		}
		f, ok, err := r.TryNext()
		if err != nil {
			t.Fatal(err)
		}
		if !ok {
			break
		}
		got = append(got, f)
	}
	if len(rec.calls) != reads {
		t.Fatalf("TryNext read from the source")
	}
	checkFrames(t, got, frames)
	if !r.Buffered() {
		t.Fatalf("Buffered false with part of a frame read")
	}
	if _, err := r.Next(); err != io.ErrUnexpectedEOF {
		t.Fatalf("Next on a cut frame = %v, want io.ErrUnexpectedEOF", err)
	}
	releaseAll(got)
}

// collect drains r with AppendMessages, falling back to Next when nothing
// whole is buffered, and returns every frame in stream order.
func collect(r *Reader) ([]ext.Frame, error) {
	var out []ext.Frame
	var msgs []ext.InboundMessage
	for {
		var other ext.Frame
		var ok bool
		var err error
		msgs, other, ok, err = r.AppendMessages(msgs[:0])
		for _, m := range msgs {
			if m.Guard != (ext.InFlightGuard{}) {
				panic("AppendMessages set a guard")
			}
			out = append(out, m.Frame)
		}
		if err != nil {
			return out, err
		}
		if ok {
			out = append(out, other)
			continue
		}
		f, err := r.Next()
		if err != nil {
			return out, err
		}
		out = append(out, f)
	}
}

func TestAppendMessages(t *testing.T) {
	m := func(i int) ext.Frame {
		return ext.Frame{Type: ext.Message, Header: pattern(3+i, byte(i)), Payload: pattern(10*i, byte(i+1))}
	}
	frames := []ext.Frame{
		m(0), m(1), m(2),
		{Type: ext.Event, Header: []byte("ev")},
		m(3),
		{Type: ext.Response, Payload: []byte("resp")},
		{Type: ext.Response, Payload: []byte("resp2")},
		m(4),
	}
	data := encodeAll(frames)
	tail := Append(nil, m(5))
	data = append(data, tail[:len(tail)-1]...) // a cut message at the end

	r := NewReader(bytes.NewReader(data), DefaultMaxFrame)
	defer r.Close()
	// Nothing is buffered yet, and AppendMessages does not read.
	dst := make([]ext.InboundMessage, 1, 16) // an entry already there stays
	out, _, ok, err := r.AppendMessages(dst)
	if len(out) != 1 || ok || err != nil {
		t.Fatalf("AppendMessages on a fresh reader = %d messages, ok %v, err %v", len(out), ok, err)
	}
	first, err := r.Next()
	if err != nil || !sameFrame(first, frames[0]) {
		t.Fatalf("Next = %v", err)
	}
	chunk := first.Owner.(*Chunk)

	steps := []struct {
		msgs  []ext.Frame
		other *ext.Frame
	}{
		{frames[1:3], &frames[3]},
		{frames[4:5], &frames[5]},
		{nil, &frames[6]},
		{frames[7:8], nil},
	}
	got := []ext.Frame{first}
	for i, s := range steps {
		out, other, ok, err := r.AppendMessages(dst[:1])
		if err != nil {
			t.Fatalf("step %d: %v", i, err)
		}
		if len(out) != 1+len(s.msgs) {
			t.Fatalf("step %d: %d messages, want %d", i, len(out)-1, len(s.msgs))
		}
		for j, want := range s.msgs {
			msg := out[1+j]
			if !sameFrame(msg.Frame, want) || msg.Owner != ext.Owner(chunk) || msg.Guard != (ext.InFlightGuard{}) {
				t.Fatalf("step %d message %d differs", i, j)
			}
			got = append(got, msg.Frame)
		}
		if ok != (s.other != nil) {
			t.Fatalf("step %d: ok %v", i, ok)
		}
		if ok {
			if !sameFrame(other, *s.other) || other.Owner != ext.Owner(chunk) {
				t.Fatalf("step %d: other frame differs", i)
			}
			got = append(got, other)
		}
	}
	checkFrames(t, got, frames)
	if _, err := r.Next(); err != io.ErrUnexpectedEOF {
		t.Fatalf("Next on the cut message = %v", err)
	}
	releaseAll(got)
}

// TestAppendMessagesBadFrames: AppendMessages keeps the messages before a
// bad frame and reports the bad frame the way Next would.
func TestAppendMessagesBadFrames(t *testing.T) {
	msg := ext.Frame{Type: ext.Message, Header: []byte("h"), Payload: []byte("p")}
	cases := map[string]struct {
		bad  []byte
		want error
	}{
		"bad version":       {rawPreamble(2, 0, 0, 0), ErrMalformed},
		"bad type":          {rawPreamble(1, 9, 0, 0), ErrMalformed},
		"too large message": {rawPreamble(1, 0, 0, 1<<30), ext.ErrFrameTooLarge},
		"too large event":   {rawPreamble(1, 3, 1<<31, 1<<31), ext.ErrFrameTooLarge},
	}
	for name, c := range cases {
		t.Run(name, func(t *testing.T) {
			data := append(encodeAll([]ext.Frame{msg, msg, msg}), c.bad...)
			r := NewReader(bytes.NewReader(data), DefaultMaxFrame)
			defer r.Close()
			first, err := r.Next()
			if err != nil {
				t.Fatal(err)
			}
			out, _, ok, err := r.AppendMessages(nil)
			if len(out) != 2 || ok || !errors.Is(err, c.want) {
				t.Fatalf("AppendMessages = %d messages, ok %v, err %v; want 2, false, %v", len(out), ok, err, c.want)
			}
			first.Release()
			for _, m := range out {
				m.Done()
			}
		})
	}
}

func TestAppendMessagesDoesNotAllocate(t *testing.T) {
	msg := Append(nil, ext.Frame{Type: ext.Message, Header: []byte("hdr"), Payload: pattern(40, 1)})
	count := minChunk / len(msg) // all of them in the first read
	data := bytes.Repeat(msg, count)
	r := NewReader(bytes.NewReader(data), DefaultMaxFrame)
	defer r.Close()
	first, err := r.Next()
	if err != nil {
		t.Fatal(err)
	}
	dst := make([]ext.InboundMessage, 0, 128)
	start, end := r.start, r.end
	var out []ext.InboundMessage
	allocs := testing.AllocsPerRun(10, func() {
		r.start = start // replay the same buffered bytes
		out, _, _, _ = r.AppendMessages(dst[:0])
	})
	if allocs != 0 {
		t.Fatalf("AppendMessages allocated %v times", allocs)
	}
	if len(out) != count-1 || r.start != end {
		t.Fatalf("AppendMessages decoded %d messages", len(out))
	}
	// The replays counted handed-out frames that were never handed out for
	// real; release them so the chunk balances.
	first.Release()
	for range 11 * (count - 1) {
		first.Owner.Release()
	}
}

// drainClass empties the free list of one chunk size class, so that the
// next getChunk of that class returns what a test puts there.
func drainClass(class int) {
	for {
		select {
		case <-chunkPools[class]:
		default:
			return
		}
	}
}

// readerClass is the size class of the first chunk a Reader takes.
var readerClass = getChunkClass(minChunk)

func getChunkClass(size int) int {
	c := getChunk(size)
	class := c.class
	c.leave(0)
	return class
}

// TestChunkReturnsToPool: a chunk goes back to its free list once the
// reader has left it and every frame read from it is released, in either
// order, and not before.
func TestChunkReturnsToPool(t *testing.T) {
	var frames []ext.Frame
	for i := range 20 {
		frames = append(frames, ext.Frame{Type: ext.MessageType(i % ext.NumMessageTypes), Header: pattern(i, byte(i)), Payload: pattern(8*i, byte(i+1))})
	}
	data := encodeAll(frames)
	if len(data) > minChunk/2 {
		t.Fatalf("stream of %d bytes does not fit the first chunk", len(data))
	}
	for _, closeFirst := range []bool{false, true} {
		t.Run(fmt.Sprintf("closeFirst=%v", closeFirst), func(t *testing.T) {
			drainClass(readerClass)
			r := NewReader(iotest.HalfReader(bytes.NewReader(data)), DefaultMaxFrame)
			got, err := readAll(r)
			if err != io.EOF {
				t.Fatal(err)
			}
			checkFrames(t, got, frames)
			chunk := got[0].Owner.(*Chunk)
			for i, f := range got {
				if f.Owner != ext.Owner(chunk) {
					t.Fatalf("frame %d has another owner", i)
				}
			}
			if chunk.class != readerClass {
				t.Fatalf("chunk class %d, want %d", chunk.class, readerClass)
			}
			if closeFirst {
				r.Close()
			}
			for _, f := range got[:len(got)-1] {
				f.Release()
			}
			if !closeFirst {
				got[len(got)-1].Release()
			}
			if n := len(chunkPools[readerClass]); n != 0 {
				t.Fatalf("chunk pooled with a reference left")
			}
			if closeFirst {
				got[len(got)-1].Release()
			} else {
				r.Close()
			}
			if n := len(chunkPools[readerClass]); n != 1 {
				t.Fatalf("%d chunks pooled, want 1", n)
			}
			c := getChunk(minChunk)
			if c != chunk {
				t.Fatalf("getChunk returned %p, want the released chunk %p", c, chunk)
			}
			c.leave(0)
		})
	}
}

// TestFrameOutlivesReaderChunk: a frame that is not released keeps its
// chunk out of the pool after the reader moves on, so other readers cannot
// reuse the memory under it.
func TestFrameOutlivesReaderChunk(t *testing.T) {
	drainClass(readerClass)
	held := ext.Frame{Type: ext.Message, Header: pattern(50, 1), Payload: pattern(200, 2)}
	frames := []ext.Frame{
		held,
		{Type: ext.Event, Payload: pattern(300<<10, 3)}, // forces a new, larger chunk
		{Type: ext.Ack, Header: []byte("x")},
		{Type: ext.Message, Payload: pattern(2<<20, 4)}, // and another
		{Type: ext.Response, Header: []byte("y")},
	}
	data := encodeAll(frames)
	r := NewReader(&chunkedReader{data: data, sizes: []int{1000, 7, 50000}}, DefaultMaxFrame)
	got, err := readAll(r)
	if err != io.EOF {
		t.Fatal(err)
	}
	checkFrames(t, got, frames)
	heldChunk := got[0].Owner.(*Chunk)
	if got[1].Owner == got[0].Owner || got[3].Owner == got[1].Owner {
		t.Fatalf("large frames did not move the reader to new chunks")
	}
	releaseAll(got[1:])
	r.Close()

	// Churn the pool of the held chunk's class: other readers and raw
	// getChunk calls take chunks and scribble over them.
	for i := range 4 {
		other := NewReader(bytes.NewReader(encodeAll(testFrames()[:10])), DefaultMaxFrame)
		fs, err := readAll(other)
		if err != io.EOF {
			t.Fatal(err)
		}
		for _, f := range fs {
			if f.Owner == ext.Owner(heldChunk) {
				t.Fatalf("round %d: another reader got the held chunk", i)
			}
		}
		releaseAll(fs)
		other.Close()
	}
	var taken []*Chunk
	for range 8 {
		c := getChunk(minChunk)
		if c == heldChunk {
			t.Fatalf("getChunk returned the chunk of an unreleased frame")
		}
		for i := range c.buf {
			c.buf[i] = 0xa5
		}
		taken = append(taken, c)
	}
	for _, c := range taken {
		c.leave(0)
	}
	if !sameFrame(got[0], held) {
		t.Fatalf("the held frame's bytes changed")
	}

	// Its release, the last reference, returns the chunk.
	drainClass(readerClass)
	got[0].Release()
	if c := getChunk(minChunk); c != heldChunk {
		t.Fatalf("the held chunk did not return to the pool on its last release")
	} else {
		c.leave(0)
	}
}

// TestReaderConcurrentRelease: consumers on other goroutines check and
// release frames while the reader goes on, with chunks recycled between
// readers; the race detector watches the hand-off.
func TestReaderConcurrentRelease(t *testing.T) {
	want := testFrames()
	data := encodeAll(want)
	var wg sync.WaitGroup
	errs := make(chan error, 4)
	for w := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			ch := make(chan ext.Frame, 8)
			done := make(chan error, 1)
			go func() {
				i := 0
				var bad error
				for f := range ch {
					if bad == nil && !sameFrame(f, want[i%len(want)]) {
						bad = fmt.Errorf("reader %d: frame %d differs", w, i)
					}
					f.Release()
					i++
				}
				done <- bad
			}()
			for round := range 3 {
				src := &randomReader{data: data, rng: rand.New(rand.NewPCG(uint64(w), uint64(round))), maxPiece: 20000}
				r := NewReader(src, DefaultMaxFrame)
				for {
					f, err := r.Next()
					if err != nil {
						if err != io.EOF {
							errs <- err
						}
						break
					}
					ch <- f
				}
				r.Close()
			}
			close(ch)
			if err := <-done; err != nil {
				errs <- err
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
}

func catchPanic(fn func()) (msg string) {
	defer func() {
		if v := recover(); v != nil {
			msg = fmt.Sprint(v)
		}
	}()
	fn()
	return ""
}

func TestRetainAfterLastReleasePanics(t *testing.T) {
	data := encodeAll([]ext.Frame{{Type: ext.Message, Payload: []byte("a")}, {Type: ext.Event, Payload: []byte("b")}})
	r := NewReader(bytes.NewReader(data), DefaultMaxFrame)
	got, err := readAll(r)
	if err != io.EOF || len(got) != 2 {
		t.Fatalf("got %d frames, err %v", len(got), err)
	}
	// A Retain while references are alive is fine, before and after the
	// reader leaves.
	got[0].Owner.Retain()
	r.Close()
	got[1].Owner.Retain()
	got[1].Release()
	got[0].Release()
	got[0].Release() // the extra reference
	got[1].Release() // the last one
	msg := catchPanic(func() { got[0].Owner.Retain() })
	if !strings.Contains(msg, "after its buffer was released") {
		t.Fatalf("Retain after the last release: panic %q, want a use-after-release panic", msg)
	}
	// The failed Retain left the count at 1; the chunk is already pooled,
	// and the next getChunk resets it.
}

func TestReleaseTooOftenPanics(t *testing.T) {
	c := getChunk(1)
	c.leave(1) // the reader handed out one frame and left
	c.Release()
	if len(chunkPools[c.class]) == 0 {
		t.Fatalf("chunk not pooled after its last release")
	}
	msg := catchPanic(func() { c.ReleaseN(1) })
	if !strings.Contains(msg, "released more often") {
		t.Fatalf("over-release: panic %q", msg)
	}
}

func TestGetChunkClasses(t *testing.T) {
	cases := []struct{ size, bufLen int }{
		{0, 4 << 10}, {1, 4 << 10}, {4 << 10, 4 << 10}, {4<<10 + 1, 8 << 10},
		{64 << 10, 64 << 10}, {64<<10 + 1, 128 << 10}, {1 << 20, 1 << 20}, {1<<20 + 1, 2 << 20},
		{DefaultMaxFrame + PreambleLen, 32 << 20},
	}
	for _, c := range cases {
		ch := getChunk(c.size)
		if len(ch.buf) != c.bufLen || 1<<(ch.class+minChunkShift) != c.bufLen {
			t.Fatalf("getChunk(%d): buffer %d class %d, want buffer %d", c.size, len(ch.buf), ch.class, c.bufLen)
		}
		ch.leave(0)
	}
}
