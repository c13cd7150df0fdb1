package ucx

import (
	"encoding/binary"
	"errors"
	"fmt"

	"github.com/velo-go/velo/ext"
)

// The kinds of Active Message velo sends; the AM id is AMIDBase + kind.
// Kinds 0 to 4 are the messenger frame types (ext.MessageType) and 5 and 6
// the health ping and pong, as in the reference. Kind 7 is this
// implementation's: see kindHello.
const (
	kindPing uint8 = 5
	kindPong uint8 = 6
	// kindHello is the first AM on every endpoint this transport creates.
	// It carries the sender's own address entry, so that a receiver that
	// never registered the sender can still answer it (a drain echo, a
	// pong) through an endpoint of its own. The reference answers those on
	// UCX's reply endpoint instead, which the binding does not expose; see
	// docs/wire.md.
	kindHello uint8 = 7
	numKinds  uint8 = 8
)

// incLen is the size of the sender's incarnation at the front of every AM
// header (version 2): little-endian, as the reference writes its ping
// token.
const incLen = 8

// tokenLen is the size of a ping or pong's token, after the incarnation.
const tokenLen = 8

// errMalformed wraps every refusal of an inbound AM.
var errMalformed = errors.New("ucx: malformed frame")

// amHeader is a decoded AM header: who sent it and what follows the
// incarnation.
type amHeader struct {
	inc  uint64
	rest []byte // the velo header of a frame, the token of a ping or pong
}

// appendFrameHeader appends the AM header of a velo frame: the sender's
// incarnation, then the velo header.
func appendFrameHeader(b []byte, inc uint64, veloHeader []byte) []byte {
	b = binary.LittleEndian.AppendUint64(b, inc)
	return append(b, veloHeader...)
}

// appendToken appends the AM header of a ping or pong.
func appendToken(b []byte, inc, token uint64) []byte {
	b = binary.LittleEndian.AppendUint64(b, inc)
	return binary.LittleEndian.AppendUint64(b, token)
}

// decodeAMHeader splits an inbound AM header by kind. It refuses a kind
// outside velo's range, a header too short for the incarnation, a ping or
// pong that is not exactly incarnation plus token, and a hello with
// anything after the incarnation. rest aliases header.
func decodeAMHeader(kind uint8, header []byte) (amHeader, error) {
	if kind >= numKinds {
		return amHeader{}, fmt.Errorf("%w: unknown kind %d", errMalformed, kind)
	}
	if len(header) < incLen {
		return amHeader{}, fmt.Errorf("%w: a header of %d bytes has no incarnation", errMalformed, len(header))
	}
	h := amHeader{inc: binary.LittleEndian.Uint64(header), rest: header[incLen:]}
	switch kind {
	case kindPing, kindPong:
		if len(h.rest) != tokenLen {
			return amHeader{}, fmt.Errorf("%w: a %s with %d bytes after the incarnation, want %d",
				errMalformed, kindName(kind), len(h.rest), tokenLen)
		}
	case kindHello:
		if len(h.rest) != 0 {
			return amHeader{}, fmt.Errorf("%w: a hello with %d bytes after the incarnation", errMalformed, len(h.rest))
		}
	}
	return h, nil
}

// token is a ping or pong's token; h came from decodeAMHeader.
func (h amHeader) token() uint64 { return binary.LittleEndian.Uint64(h.rest) }

// decodeHello checks a hello's body, the sender's address entry, against
// the incarnation in its header.
func decodeHello(h amHeader, data []byte) (endpoint, error) {
	e, err := decodeEndpoint(data)
	if err != nil {
		return e, fmt.Errorf("%w: hello: %w", errMalformed, err)
	}
	if e.incarnation != h.inc {
		return e, fmt.Errorf("%w: hello for incarnation %#x in a header of %#x", errMalformed, e.incarnation, h.inc)
	}
	return e, nil
}

func kindName(k uint8) string {
	switch {
	case k < uint8(ext.NumMessageTypes):
		return ext.MessageType(k).String()
	case k == kindPing:
		return "ping"
	case k == kindPong:
		return "pong"
	case k == kindHello:
		return "hello"
	}
	return fmt.Sprintf("kind(%d)", k)
}
