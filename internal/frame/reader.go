package frame

import (
	"encoding/binary"
	"io"
	"math/bits"

	"github.com/velo-go/velo/ext"
)

// How a Reader sizes its buffer.
//
// A length in a preamble is a promise, not a reservation: the chunk under a
// frame in progress is never bigger than four times the bytes of it in
// hand, or 64 KiB, so a peer that announces a 16 MiB frame and then sends
// nothing costs one 64 KiB chunk, not 16 MiB. A large frame's chunk grows
// as its bytes arrive, four times over at each move, so an 8 MiB frame moves
// five times and the bytes copied stay under half the frame's size.
// (Doubling, which would hold at most twice the bytes in hand after
// rounding to a chunk, copied about twice the frame, and the 8 MiB
// pipelined throughput on loopback measured about 15% lower with it, on a
// busy machine. Growing four times over copies under half the frame:
// BenchmarkReaderLargeFrame.)
//
// Between frames the buffer follows the reads: it doubles after a read that
// filled it (the sender is ahead) and drops back to a small one after a
// short read (the reader caught up). An idle connection therefore holds a
// 4 KiB chunk, not the 128 KiB a busy one reads into.
const (
	// minChunk is the buffer a new Reader starts with, and the one it
	// returns to when its reads are short.
	minChunk = 1 << minChunkShift
	// maxReadChunk is the largest buffer a run of small frames is read
	// into: one read takes at most this much from the socket.
	maxReadChunk = 128 << 10
	// stepAhead is how far past the bytes in hand the buffer of a frame in
	// progress may reach, when the frame is longer than that; or the bytes
	// in hand, when they are more.
	stepAhead = 64 << 10
	// minReadRoom is the least free space a read is made into, so reads do
	// not shrink to a trickle at the end of a chunk.
	minReadRoom = 4 << 10
	// directPeek bounds the first read after a payload that went to
	// Direct. Large payloads come in runs (a transfer's chunks), and a read
	// of the usual size would take up to maxReadChunk of the next payload
	// into the buffer, to be copied out again once Direct takes it: a
	// quarter of every 512 KiB chunk. One read this small holds the next
	// frame's preamble and header, so the rest of its payload goes straight
	// to its place; it costs at most one more read when small frames
	// follow instead.
	directPeek = 4 << 10
)

// Reader splits a byte stream into frames without copying them out.
//
// It reads into a pooled chunk and hands out frames that alias the chunk,
// with the chunk as their Owner. A chunk is never written again below what
// was handed out, so frames stay valid after later reads; when a chunk
// fills, the unread tail moves to a fresh chunk, and the old one goes back
// to its pool once every frame read into it is released (or to the GC if
// some never are). How big a chunk is: see the constants above.
type Reader struct {
	r      io.Reader
	max    int
	chunk  *Chunk
	handed int64 // frames handed out from chunk
	buf    []byte
	start  int   // first unparsed byte
	end    int   // end of the bytes read
	base   int64 // stream offset of buf[0]
	size   int   // the chunk a run of small frames is read into: minChunk..maxReadChunk

	// Conn is stamped on every frame handed out (see ext.Frame.Conn).
	Conn ext.ConnID
	// Direct, when set, may take a large payload straight from the socket
	// (see DirectFunc). Set it before the first Next.
	Direct    DirectFunc
	declined  int64 // 1 + the offset of the frame Direct last turned down
	peek      bool  // the last frame went to Direct: the next read is at most directPeek
	directMin int   // the smallest payload offered to Direct; 0 is DirectMin (tests lower it)
}

// MaxFrameLimit is the largest max a Reader accepts: the biggest chunk
// class must hold a whole frame.
const MaxFrameLimit = 1<<maxChunkShift - PreambleLen

// NewReader reads frames of at most max bytes (header plus payload) from r.
// A max above MaxFrameLimit is lowered to it. It takes no buffer until the
// first read.
func NewReader(r io.Reader, max int) *Reader {
	return &Reader{r: r, max: min(max, MaxFrameLimit), size: minChunk}
}

// Buffered reports whether a whole frame or part of one is already read.
func (r *Reader) Buffered() bool { return r.end > r.start }

// Offset is the position in the stream of the first byte not yet handed
// out in a frame: while Buffered, the start of the frame in progress.
func (r *Reader) Offset() int64 { return r.base + int64(r.start) }

// BufferSize is the size of the chunk the Reader reads into now (0 before
// the first read). Tests use it to see what an idle reader holds.
func (r *Reader) BufferSize() int { return len(r.buf) }

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
		if r.Direct != nil && r.declined != r.Offset()+1 {
			handled, err := r.tryDirect()
			if handled {
				if err != nil {
					return ext.Frame{}, err
				}
				continue
			}
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
	f.Conn = r.Conn
	return f
}

// Close gives the current chunk back once its frames are released. The
// Reader must not be used afterwards.
func (r *Reader) Close() {
	r.leave()
	r.buf = nil
}

// leave drops the reader's hold on its chunk.
func (r *Reader) leave() {
	if r.chunk != nil {
		r.chunk.leave(r.handed)
		r.chunk, r.handed = nil, 0
	}
}

// fill reads at least one more byte, first making room for the frame that
// is in progress.
func (r *Reader) fill() error {
	have := r.end - r.start
	need := PreambleLen // the length of the frame in progress, once known
	if have >= PreambleLen {
		p, err := ParsePreamble(r.buf[r.start:r.end], r.max)
		if err != nil {
			return err
		}
		need = p.FrameLen()
	}
	// want is the chunk the frame in progress should sit in: one of the
	// usual size when it fits; otherwise the biggest chunk within the step
	// beyond the bytes in hand, which is the whole frame once its chunk is
	// in reach, never before.
	want := r.size
	if need > want {
		limit := max(stepAhead, 4*have)
		if chunkBytes(need) <= limit {
			want = need
		} else {
			want = 1 << (bits.Len(uint(limit)) - 1)
		}
	}
	room := len(r.buf) - r.end
	minRoom := min(minReadRoom, r.size/4)
	if len(r.buf)-r.start < min(need, want) || // the frame cannot grow here as far as it may
		room < minRoom || // reads would shrink to a trickle
		len(r.buf)-r.start >= 4*want { // a buffer far bigger than the frame needs (a large frame's, say): give it back
		nc := getChunk(max(want, have+minRoom))
		copy(nc.buf, r.buf[r.start:r.end])
		r.leave()
		r.base += int64(r.start)
		r.chunk, r.buf, r.start, r.end = nc, nc.buf, 0, have
		room = len(r.buf) - have
	}
	dst := r.buf[r.end:]
	peeked := r.peek && room > directPeek
	if peeked {
		dst = dst[:directPeek]
	}
	r.peek = false
	n, err := r.r.Read(dst)
	r.end += n
	switch {
	case peeked:
		// A read cut short on purpose says nothing of the sender's pace.
	case n == room:
		// The sender is ahead of us: read more at a time.
		r.size = min(2*r.size, maxReadChunk)
	case n > 0 && n < r.size/4:
		// We caught up: the next chunk need only hold reads like this one.
		r.size = max(minChunk, 1<<bits.Len(uint(2*n-1)))
	}
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
		m.Conn = r.Conn
		off += end
		handed++
	}
	r.start += off
	r.handed += handed
	other, ok, err = r.TryNext()
	return dst, other, ok, err
}
