package frame

import (
	"io"

	"github.com/velo-go/velo/ext"
)

// chunkSize is the read buffer a Reader starts a new chunk with.
const chunkSize = 64 << 10

// Reader splits a byte stream into frames without copying them out.
//
// It reads into a chunk and hands out frames that alias the chunk. A chunk is
// never written again below what was handed out, so frames stay valid after
// later reads; when a chunk fills, the unread tail moves to a fresh chunk and
// the old one lives as long as its frames do. That is one allocation per
// chunk, not one per frame. Once a preamble is parsed the next chunk is sized
// for the whole frame, so a large frame is read without regrowing.
type Reader struct {
	r     io.Reader
	max   int
	buf   []byte
	start int // first unparsed byte
	end   int // end of the bytes read
}

// NewReader reads frames of at most max bytes (header plus payload) from r.
func NewReader(r io.Reader, max int) *Reader {
	return &Reader{r: r, max: max}
}

// Buffered reports whether a whole frame or part of one is already read.
func (r *Reader) Buffered() bool { return r.end > r.start }

// Next returns the next frame. An error ends the stream: io.EOF at a clean
// end, io.ErrUnexpectedEOF inside a frame, ErrMalformed or a
// *ext.FrameTooLargeError for bad input, or the read error.
func (r *Reader) Next() (ext.Frame, error) {
	for {
		f, n, err := Decode(r.buf[r.start:r.end], r.max)
		if err != nil {
			return ext.Frame{}, err
		}
		if n > 0 {
			r.start += n
			return f, nil
		}
		if err := r.fill(); err != nil {
			return ext.Frame{}, err
		}
	}
}

// TryNext returns a frame already in the buffer without reading; ok is false
// when none is whole yet.
func (r *Reader) TryNext() (f ext.Frame, ok bool, err error) {
	f, n, err := Decode(r.buf[r.start:r.end], r.max)
	if err != nil || n == 0 {
		return ext.Frame{}, false, err
	}
	r.start += n
	return f, true, nil
}

// fill reads at least one more byte, first making room for the frame that
// is in progress.
func (r *Reader) fill() error {
	have := r.end - r.start
	need := PreambleLen
	if have >= PreambleLen {
		p, err := ParsePreamble(r.buf[r.start:r.end], r.max)
		if err != nil {
			return err
		}
		need = p.FrameLen()
	}
	if len(r.buf)-r.start < need || r.end == len(r.buf) {
		size := max(chunkSize, need)
		nb := make([]byte, size)
		copy(nb, r.buf[r.start:r.end])
		r.buf, r.start, r.end = nb, 0, have
	}
	n, err := r.r.Read(r.buf[r.end:])
	r.end += n
	if n > 0 {
		return nil
	}
	if err == io.EOF && have > 0 {
		return io.ErrUnexpectedEOF
	}
	if err == nil {
		err = io.ErrNoProgress
	}
	return err
}
