package frame

import (
	"encoding/binary"
	"io"

	"github.com/velo-go/velo/ext"
)

// chunkSize is the read buffer a Reader starts a new chunk with.
const chunkSize = 64 << 10

// minReadRoom is the least free space a read is made into.
const minReadRoom = 4 << 10

// Reader splits a byte stream into frames without copying them out.
//
// It reads into a pooled chunk and hands out frames that alias the chunk,
// with the chunk as their Owner. A chunk is never written again below what
// was handed out, so frames stay valid after later reads; when a chunk
// fills, the unread tail moves to a fresh chunk, and the old one goes back
// to its pool once every frame read into it is released (or to the GC if
// some never are). Once a preamble is parsed the next chunk is sized for the
// whole frame, so a large frame is read without regrowing.
type Reader struct {
	r      io.Reader
	max    int
	chunk  *Chunk
	handed int64 // frames handed out from chunk
	buf    []byte
	start  int // first unparsed byte
	end    int // end of the bytes read
}

// MaxFrameLimit is the largest max a Reader accepts: the biggest chunk
// class must hold a whole frame and a chunk of slack.
const MaxFrameLimit = 1<<maxChunkShift - chunkSize - PreambleLen

// NewReader reads frames of at most max bytes (header plus payload) from r.
// A max above MaxFrameLimit is lowered to it.
func NewReader(r io.Reader, max int) *Reader {
	return &Reader{r: r, max: min(max, MaxFrameLimit)}
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
			return r.owned(f), nil
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
	return r.owned(f), true, nil
}

func (r *Reader) owned(f ext.Frame) ext.Frame {
	r.handed++
	f.Owner = r.chunk
	return f
}

// Close gives the current chunk back once its frames are released. The
// Reader must not be used afterwards.
func (r *Reader) Close() {
	if r.chunk != nil {
		r.chunk.leave(r.handed)
		r.chunk, r.buf, r.handed = nil, nil, 0
	}
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
	// A new chunk when the frame in progress cannot fit, or when so little
	// room is left that reads would shrink to a trickle.
	if len(r.buf)-r.start < need || len(r.buf)-r.end < minReadRoom {
		// Room for the frame in progress and then some, so the next
		// frame's start does not force another move at once.
		nc := getChunk(need + chunkSize)
		copy(nc.buf, r.buf[r.start:r.end])
		r.Close()
		r.chunk, r.buf, r.start, r.end = nc, nc.buf, 0, have
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

// AppendMessages decodes the Message frames already buffered straight onto
// dst, stopping at the first frame of another type, which it returns as
// other (ok true), or when no whole frame is left. It reads nothing from
// the socket. Decoding in place saves the copies a frame-at-a-time loop
// makes on the request path.
func (r *Reader) AppendMessages(dst []ext.InboundMessage) (out []ext.InboundMessage, other ext.Frame, ok bool, err error) {
	b := r.buf[r.start:r.end]
	var owner ext.Owner = r.chunk
	off, handed := 0, int64(0)
	for len(b)-off >= PreambleLen {
		p := b[off:]
		h := uint64(binary.BigEndian.Uint32(p[3:]))
		n := uint64(binary.BigEndian.Uint32(p[7:]))
		if p[0] != 0 || p[1] != SchemaVersion || p[2] != byte(ext.Message) || h+n > uint64(r.max) {
			break // not a well-formed request: let TryNext judge it
		}
		hEnd := PreambleLen + int(h)
		end := hEnd + int(n)
		if len(p) < end {
			break
		}
		dst = append(dst, ext.InboundMessage{})
		m := &dst[len(dst)-1]
		m.Type = ext.Message
		m.Header = p[PreambleLen:hEnd:hEnd]
		m.Payload = p[hEnd:end:end]
		m.Owner = owner
		off += end
		handed++
	}
	r.start += off
	r.handed += handed
	other, ok, err = r.TryNext()
	return dst, other, ok, err
}
