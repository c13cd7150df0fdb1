package messenger

import (
	"encoding/binary"
	"errors"
	"fmt"
	"sort"
	"unicode/utf8"

	"github.com/velo-go/velo/ext"
)

// ResponseType says what a request's caller waits for.
type ResponseType uint8

// Response types, as on the wire.
const (
	FireAndForget ResponseType = 0
	AckNack       ResponseType = 1
	UnaryResponse ResponseType = 2
)

func (r ResponseType) String() string {
	switch r {
	case FireAndForget:
		return "fire_and_forget"
	case AckNack:
		return "sync"
	case UnaryResponse:
		return "unary"
	}
	return "unknown"
}

// ResponseID names the caller's response slot. Hi is the caller's WorkerID,
// so a reply can be routed without any other state; Lo is the slot token
// (zero for fire-and-forget).
type ResponseID struct {
	Hi, Lo uint64
}

// Worker is the caller's WorkerID.
func (r ResponseID) Worker() ext.WorkerID { return ext.WorkerID(r.Hi) }

const (
	headerSchema = 1
	// MaxHeaderValue and MaxEncodedHeaders bound user headers.
	MaxHeaderValue    = 1024
	MaxEncodedHeaders = 16 << 10
	maxHandlerName    = 1024
	fixedHeaderLen    = 1 + 1 + 16 + 2
	replyHeaderLen    = 1 + 1 + 16
)

// ErrMalformedHeader wraps every header decoding failure.
var ErrMalformedHeader = errors.New("velo: malformed message header")

// requestHeader is the decoded active-message header.
type requestHeader struct {
	rtype   ResponseType
	id      ResponseID
	handler []byte // aliases the frame
	headers []byte // raw MessagePack map, aliases the frame
}

// appendRequestHeader encodes
//
//	[u8 schema=1][u8 response_type][u128 LE response_id]
//	[u16 LE name_len][name][u16 LE headers_len][headers]
func appendRequestHeader(dst []byte, rt ResponseType, id ResponseID, handler string, headers []byte) []byte {
	dst = append(dst, headerSchema, byte(rt))
	dst = binary.LittleEndian.AppendUint64(dst, id.Lo)
	dst = binary.LittleEndian.AppendUint64(dst, id.Hi)
	dst = binary.LittleEndian.AppendUint16(dst, uint16(len(handler)))
	dst = append(dst, handler...)
	dst = binary.LittleEndian.AppendUint16(dst, uint16(len(headers)))
	return append(dst, headers...)
}

// parseRequestHeader decodes a request header without allocating.
func parseRequestHeader(b []byte) (requestHeader, error) {
	var h requestHeader
	if len(b) < fixedHeaderLen {
		return h, fmt.Errorf("%w: %d bytes", ErrMalformedHeader, len(b))
	}
	if b[0] != headerSchema {
		return h, fmt.Errorf("%w: schema %d", ErrMalformedHeader, b[0])
	}
	h.rtype = ResponseType(b[1])
	if h.rtype > UnaryResponse {
		return h, fmt.Errorf("%w: response type %d", ErrMalformedHeader, b[1])
	}
	h.id.Lo = binary.LittleEndian.Uint64(b[2:])
	h.id.Hi = binary.LittleEndian.Uint64(b[10:])
	n := int(binary.LittleEndian.Uint16(b[18:]))
	rest := b[20:]
	if n > len(rest) || n > maxHandlerName {
		return h, fmt.Errorf("%w: handler name of %d bytes", ErrMalformedHeader, n)
	}
	h.handler, rest = rest[:n], rest[n:]
	if len(rest) < 2 {
		return h, fmt.Errorf("%w: no headers length", ErrMalformedHeader)
	}
	m := int(binary.LittleEndian.Uint16(rest))
	rest = rest[2:]
	if m != len(rest) || m > MaxEncodedHeaders {
		return h, fmt.Errorf("%w: headers of %d bytes in %d", ErrMalformedHeader, m, len(rest))
	}
	h.headers = rest
	return h, nil
}

// reply status bytes.
const (
	statusOK  = 0
	statusErr = 1
)

// appendReplyHeader encodes the header of a Response or Ack frame:
// [u8 schema=1][u8 status: 0 ok, 1 error][u128 LE response_id]. An error
// reply carries the error text as its payload.
func appendReplyHeader(dst []byte, status byte, id ResponseID) []byte {
	dst = append(dst, headerSchema, status)
	dst = binary.LittleEndian.AppendUint64(dst, id.Lo)
	return binary.LittleEndian.AppendUint64(dst, id.Hi)
}

func parseReplyHeader(b []byte) (status byte, id ResponseID, err error) {
	if len(b) != replyHeaderLen || b[0] != headerSchema || b[1] > statusErr {
		return 0, id, fmt.Errorf("%w: reply header of %d bytes", ErrMalformedHeader, len(b))
	}
	return b[1], ResponseID{Lo: binary.LittleEndian.Uint64(b[2:]), Hi: binary.LittleEndian.Uint64(b[10:])}, nil
}

// EncodeHeaders writes user headers as a MessagePack map of str to str,
// keys sorted. It enforces the value and total limits.
func EncodeHeaders(h map[string]string) ([]byte, error) {
	if len(h) == 0 {
		return nil, nil
	}
	keys := make([]string, 0, len(h))
	for k, v := range h {
		if !utf8.ValidString(k) || !utf8.ValidString(v) {
			return nil, fmt.Errorf("velo: header %q is not UTF-8", k)
		}
		if len(v) > MaxHeaderValue {
			return nil, fmt.Errorf("velo: header %q value of %d bytes exceeds %d", k, len(v), MaxHeaderValue)
		}
		keys = append(keys, k)
	}
	sort.Strings(keys)
	var b []byte
	switch n := len(keys); {
	case n < 16:
		b = append(b, 0x80|byte(n))
	default:
		b = binary.BigEndian.AppendUint16(append(b, 0xde), uint16(n))
	}
	for _, k := range keys {
		b = appendMsgpackStr(b, k)
		b = appendMsgpackStr(b, h[k])
	}
	if len(b) > MaxEncodedHeaders {
		return nil, fmt.Errorf("velo: encoded headers of %d bytes exceed %d", len(b), MaxEncodedHeaders)
	}
	return b, nil
}

func appendMsgpackStr(b []byte, s string) []byte {
	switch n := len(s); {
	case n < 32:
		b = append(b, 0xa0|byte(n))
	case n < 256:
		b = append(b, 0xd9, byte(n))
	default:
		b = binary.BigEndian.AppendUint16(append(b, 0xda), uint16(n))
	}
	return append(b, s...)
}

// DecodeHeaders reads what EncodeHeaders writes. It never panics and
// allocates no more than the input justifies.
func DecodeHeaders(b []byte) (map[string]string, error) {
	if len(b) == 0 {
		return nil, nil
	}
	if len(b) > MaxEncodedHeaders {
		return nil, fmt.Errorf("%w: headers of %d bytes", ErrMalformedHeader, len(b))
	}
	var n int
	switch t := b[0]; {
	case t&0xf0 == 0x80:
		n, b = int(t&0x0f), b[1:]
	case t == 0xde && len(b) >= 3:
		n, b = int(binary.BigEndian.Uint16(b[1:])), b[3:]
	default:
		return nil, fmt.Errorf("%w: headers are not a map", ErrMalformedHeader)
	}
	if n > len(b)/2 {
		return nil, fmt.Errorf("%w: %d entries in %d bytes", ErrMalformedHeader, n, len(b))
	}
	out := make(map[string]string, n)
	for i := 0; i < n; i++ {
		var k, v string
		var err error
		if k, b, err = readMsgpackStr(b); err != nil {
			return nil, err
		}
		if v, b, err = readMsgpackStr(b); err != nil {
			return nil, err
		}
		if len(v) > MaxHeaderValue {
			return nil, fmt.Errorf("%w: value of %d bytes", ErrMalformedHeader, len(v))
		}
		out[k] = v
	}
	if len(b) != 0 {
		return nil, fmt.Errorf("%w: %d trailing bytes", ErrMalformedHeader, len(b))
	}
	return out, nil
}

func readMsgpackStr(b []byte) (string, []byte, error) {
	if len(b) == 0 {
		return "", nil, fmt.Errorf("%w: truncated", ErrMalformedHeader)
	}
	var n int
	switch t := b[0]; {
	case t&0xe0 == 0xa0:
		n, b = int(t&0x1f), b[1:]
	case t == 0xd9 && len(b) >= 2:
		n, b = int(b[1]), b[2:]
	case t == 0xda && len(b) >= 3:
		n, b = int(binary.BigEndian.Uint16(b[1:])), b[3:]
	default:
		return "", nil, fmt.Errorf("%w: expected a string, got 0x%02x", ErrMalformedHeader, t)
	}
	if n > len(b) {
		return "", nil, fmt.Errorf("%w: truncated string", ErrMalformedHeader)
	}
	if !utf8.Valid(b[:n]) {
		return "", nil, fmt.Errorf("%w: header is not UTF-8", ErrMalformedHeader)
	}
	return string(b[:n]), b[n:], nil
}
