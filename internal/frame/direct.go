package frame

import (
	"encoding/binary"
	"errors"
	"io"

	"github.com/velo-go/velo/ext"
)

// DirectMin is the smallest payload a Reader offers to its Direct hook.
// Below it the copy out of the read buffer costs less than the extra read
// a direct payload takes.
const DirectMin = 64 << 10

// DirectFunc is asked, for a frame whose header is in hand but whose
// payload of n bytes (n >= DirectMin) is not, where the payload should go.
// It returns nil to let the frame be read as usual, or a slice of exactly n
// bytes and a function that the Reader calls once the payload is in it
// (err nil) or cannot be (the read error). Such a frame is not returned by
// Next: whoever gave the slice has it. header is valid only during the call.
type DirectFunc func(t ext.MessageType, header []byte, n int) (dst []byte, done func(err error))

// tryDirect offers the frame in progress to r.Direct and, when taken, reads
// its payload straight into the slice it gave: the bytes already in the
// buffer are copied, the rest come from the socket without a stop in the
// buffer. handled reports that the frame is gone (err is then the read
// error, which ends the stream).
//
// While the payload is read the frame stays in progress: Buffered is true
// and Offset names the frame, so what bounds a half-received frame (the
// transport's stall guard) bounds this one too.
func (r *Reader) tryDirect() (handled bool, err error) {
	b := r.buf[r.start:r.end]
	if len(b) < PreambleLen {
		return false, nil
	}
	h := int(binary.BigEndian.Uint32(b[3:]))
	n := int(binary.BigEndian.Uint32(b[7:]))
	// Decode has checked the preamble (version, type, size) already.
	least := r.directMin
	if least == 0 {
		least = DirectMin
	}
	if n < least || len(b) < PreambleLen+h || len(b) >= PreambleLen+h+n {
		return false, nil
	}
	dst, done := r.Direct(ext.MessageType(b[2]), b[PreambleLen:PreambleLen+h:PreambleLen+h], n)
	if len(dst) != n || done == nil {
		r.declined = r.Offset() + 1 // not asked again for this frame
		return false, nil
	}
	k := copy(dst, b[PreambleLen+h:])
	_, err = io.ReadFull(r.r, dst[k:])
	if err != nil {
		if errors.Is(err, io.EOF) {
			err = io.ErrUnexpectedEOF
		}
		done(err)
		return true, err
	}
	// The bytes read past the buffer count in the stream's offset.
	r.base += int64(n - k)
	r.start = r.end
	r.peek = true
	done(nil)
	return true, nil
}
