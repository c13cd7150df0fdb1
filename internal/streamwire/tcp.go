package streamwire

import (
	"encoding/binary"
	"fmt"

	"github.com/velo-go/velo/ext"
	"github.com/velo-go/velo/internal/frame"
)

// The per-stream TCP transport (lib/velo/src/streaming/tcp_transport.rs)
// opens one connection per stream, from the producer to the consumer's
// streaming listener (transport key "tcp-stream"). The producer writes a
// 16-byte preamble that names the stream, then stream frames, each as a
// messenger frame (docs/wire.md) of type Message with an empty header and
// the stream frame as payload. The consumer writes nothing back. The
// producer stops after a terminal frame and closes the connection.

// TCPPreambleLen is the size of the preamble a per-stream connection
// starts with.
const TCPPreambleLen = 16

// MaxTCPFrame is the largest header plus payload the per-stream TCP codec
// takes (transports/tcp/framing.rs, DEFAULT_MAX_FRAME_SIZE).
const MaxTCPFrame = frame.DefaultMaxFrame

// TCPPreamble names the stream of a per-stream TCP connection:
// [u64 BE anchor id][u64 BE session id]. The anchor id is the handle's
// LocalID (MPSCBit included); the session id is the attach answer's
// RoutingSessionID, or the producer's own SessionID when that is 0.
type TCPPreamble struct {
	AnchorID  uint64
	SessionID uint64
}

// Append appends the 16 bytes of the preamble.
func (p TCPPreamble) Append(dst []byte) []byte {
	dst = binary.BigEndian.AppendUint64(dst, p.AnchorID)
	return binary.BigEndian.AppendUint64(dst, p.SessionID)
}

// DecodeTCPPreamble reads a preamble from the first TCPPreambleLen bytes
// of b. Bytes after them are the connection's frames and are not looked at.
func DecodeTCPPreamble(b []byte) (TCPPreamble, error) {
	if len(b) < TCPPreambleLen {
		return TCPPreamble{}, malformed("tcp stream preamble: %d bytes of %d", len(b), TCPPreambleLen)
	}
	return TCPPreamble{
		AnchorID:  binary.BigEndian.Uint64(b[0:]),
		SessionID: binary.BigEndian.Uint64(b[8:]),
	}, nil
}

// AppendTCPFrame appends one stream frame as the per-stream connection
// carries it: the 11-byte messenger preamble (schema 1, type Message,
// header length 0, payload length), then the frame.
func AppendTCPFrame(dst, streamFrame []byte) []byte {
	return frame.Append(dst, ext.Frame{Type: ext.Message, Payload: streamFrame})
}

// CheckTCPFrameSize returns an error when a stream frame is too large for
// a per-stream connection (the sender returns ItemTooLargeError).
func CheckTCPFrameSize(streamFrame []byte) error {
	if len(streamFrame) > MaxTCPFrame {
		return fmt.Errorf("velo: stream frame of %d bytes exceeds %d", len(streamFrame), MaxTCPFrame)
	}
	return nil
}

// DecodeTCPFrame reads one frame from the start of b, which follows the
// preamble on a per-stream connection. It returns the stream frame (a
// slice of b) and the bytes consumed; n == 0 and no error mean b does not
// yet hold a whole frame. max bounds header plus payload (MaxTCPFrame
// unless the caller chose less); a larger announced length is an error
// before any byte of it is read. A frame of another type than Message, or
// with a header, is refused: the reference never writes one (its reader
// ignores both).
func DecodeTCPFrame(b []byte, max int) (streamFrame []byte, n int, err error) {
	f, n, err := frame.Decode(b, max)
	if err != nil {
		return nil, 0, fmt.Errorf("%w: tcp stream frame: %w", ErrMalformed, err)
	}
	if n == 0 {
		return nil, 0, nil
	}
	if f.Type != ext.Message || len(f.Header) != 0 {
		return nil, 0, malformed("tcp stream frame: type %d with a %d-byte header, want Message and none", f.Type, len(f.Header))
	}
	return f.Payload, n, nil
}
