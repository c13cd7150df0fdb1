package messenger

import (
	"encoding/binary"
	"errors"
	"fmt"
	"sort"
	"unicode/utf8"

	"github.com/velo-go/velo/ext"
	"github.com/velo-go/velo/internal/mpread"
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

// ResponseID names the caller's response slot. It is a u128 on the wire
// (little-endian), laid out as the reference implementation lays it out
// (lib/velo/src/messenger/common/responses.rs): bits 0-63 are the caller's
// WorkerID, so a reply can be routed without any other state; bits 64-79
// are the slot index and bits 80-127 a 48-bit generation. Lo holds bits
// 0-63 and Hi bits 64-127. This node draws each generation at random, so
// Hi is the slot token; it is zero for fire-and-forget.
type ResponseID struct {
	Lo, Hi uint64
}

// Worker is the caller's WorkerID.
func (r ResponseID) Worker() ext.WorkerID { return ext.WorkerID(r.Lo) }

// Slot is the index of the caller's response slot.
func (r ResponseID) Slot() uint16 { return uint16(r.Hi) }

// Generation is the 48-bit generation of the caller's response slot.
func (r ResponseID) Generation() uint64 { return r.Hi >> 16 }

// AppendLE appends the id as 16 little-endian bytes.
func (r ResponseID) AppendLE(b []byte) []byte {
	b = binary.LittleEndian.AppendUint64(b, r.Lo)
	return binary.LittleEndian.AppendUint64(b, r.Hi)
}

func readResponseID(b []byte) ResponseID {
	return ResponseID{Lo: binary.LittleEndian.Uint64(b), Hi: binary.LittleEndian.Uint64(b[8:])}
}

const (
	headerSchema = 1
	// MaxHeaderValue and MaxEncodedHeaders bound user headers.
	MaxHeaderValue    = 1024
	MaxEncodedHeaders = 16 << 10
	maxHandlerName    = 1024
	fixedHeaderLen    = 1 + 1 + 16 + 2
	// responseHeaderLen is the fixed part of a Response header.
	responseHeaderLen = 16 + 1 + 2
	// ackHeaderLen is the whole of an Ack (or Event) header.
	ackHeaderLen = 1 + 16
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
	dst = id.AppendLE(dst)
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
	h.id = readResponseID(b[2:])
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

// Response outcomes.
const (
	outcomeOK  = 0
	outcomeErr = 1
)

// appendResponseHeader encodes the header of a Response frame as the
// reference does (responses.rs, encode_response_header):
//
//	[u128 LE response_id][u8 outcome: 0 ok, 1 error][u16 LE headers_len][headers]
//
// headers is a MessagePack map of str to str, or empty. An error reply
// carries the error text as its payload.
func appendResponseHeader(dst []byte, id ResponseID, outcome byte, headers []byte) []byte {
	dst = id.AppendLE(dst)
	dst = append(dst, outcome)
	dst = binary.LittleEndian.AppendUint16(dst, uint16(len(headers)))
	return append(dst, headers...)
}

// parseResponseHeader decodes a Response header. The header map aliases b.
// It is stricter than the reference, which reads any nonzero outcome as an
// error and ignores bytes after the map: neither is ever written.
func parseResponseHeader(b []byte) (id ResponseID, outcome byte, headers []byte, err error) {
	if len(b) < responseHeaderLen {
		return id, 0, nil, fmt.Errorf("%w: response header of %d bytes", ErrMalformedHeader, len(b))
	}
	id, outcome = readResponseID(b), b[16]
	if outcome > outcomeErr {
		return id, 0, nil, fmt.Errorf("%w: response outcome %d", ErrMalformedHeader, outcome)
	}
	n := int(binary.LittleEndian.Uint16(b[17:]))
	if n != len(b)-responseHeaderLen || n > MaxEncodedHeaders {
		return id, 0, nil, fmt.Errorf("%w: response headers of %d bytes in %d", ErrMalformedHeader, n, len(b)-responseHeaderLen)
	}
	return id, outcome, b[responseHeaderLen:], nil
}

// Flag bits of an Ack or Event header (the reference's events.rs).
const (
	ackFlagEvent = 1 << 0 // an Event frame's header; clear for an Ack
	ackFlagError = 1 << 1 // a Nack, or a poisoned event
)

// appendAckHeader encodes the header of an Ack frame: [u8 flags][u128 LE id].
// A Nack sets ackFlagError and carries the error text as its payload.
func appendAckHeader(dst []byte, id ResponseID, failed bool) []byte {
	flags := byte(0)
	if failed {
		flags = ackFlagError
	}
	return id.AppendLE(append(dst, flags))
}

// parseAckHeader decodes an Ack or Event header. Flag bits other than the
// two defined ones are refused, as the reference refuses them.
func parseAckHeader(b []byte) (flags byte, id ResponseID, err error) {
	if len(b) != ackHeaderLen || b[0]&^(ackFlagEvent|ackFlagError) != 0 {
		return 0, id, fmt.Errorf("%w: ack header of %d bytes", ErrMalformedHeader, len(b))
	}
	return b[0], readResponseID(b[1:]), nil
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
	r := mpread.New(b, ErrMalformedHeader)
	n, err := r.MapLen() // refuses a count the bytes cannot hold
	if err != nil {
		return nil, err
	}
	out := make(map[string]string, n)
	for range n {
		k, err := r.StrUTF8()
		if err != nil {
			return nil, err
		}
		v, err := r.StrUTF8()
		if err != nil {
			return nil, err
		}
		if len(v) > MaxHeaderValue {
			return nil, fmt.Errorf("%w: value of %d bytes", ErrMalformedHeader, len(v))
		}
		out[string(k)] = string(v)
	}
	if r.Len() != 0 {
		return nil, fmt.Errorf("%w: %d trailing bytes", ErrMalformedHeader, r.Len())
	}
	return out, nil
}
