package messenger

import (
	"encoding/binary"
	"fmt"

	"github.com/velo-go/velo/internal/msgwire"
)

const (
	headerSchema   = 1
	maxHandlerName = 1024
	fixedHeaderLen = 1 + 1 + 16 + 2
	// responseHeaderLen is the fixed part of a Response header.
	responseHeaderLen = 16 + 1 + 2
	// ackHeaderLen is the whole of an Ack (or Event) header.
	ackHeaderLen = 1 + 16
)

// requestHeader is the decoded active-message header.
type requestHeader struct {
	rtype msgwire.ResponseType
	// fetched is not on the wire: the request's payload is its staged
	// payload, fetched into a buffer of its own (resolveStaged). Here it
	// takes the padding after rtype, and a job stays within its size.
	fetched bool
	// follows is not on the wire either: a spawn worker sets it on the
	// request it takes when more wait in its queue, so that the answer
	// tells the transport that more answers follow (ext.Frame.Follows).
	// It takes the padding too.
	follows bool
	id      msgwire.ResponseID
	handler []byte // aliases the frame
	headers []byte // raw MessagePack map, aliases the frame
}

// appendRequestHeader encodes
//
//	[u8 schema=1][u8 response_type][u128 LE response_id]
//	[u16 LE name_len][name][u16 LE headers_len][headers]
func appendRequestHeader(dst []byte, rt msgwire.ResponseType, id msgwire.ResponseID, handler string, headers []byte) []byte {
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
	err := parseRequestHeaderInto(b, &h)
	return h, err
}

// parseRequestHeaderInto is parseRequestHeader into *h, for a reader that
// builds the request's job where it is queued. On error *h holds part of
// the header.
func parseRequestHeaderInto(b []byte, h *requestHeader) error {
	if len(b) < fixedHeaderLen {
		return fmt.Errorf("%w: %d bytes", msgwire.ErrMalformedHeader, len(b))
	}
	if b[0] != headerSchema {
		return fmt.Errorf("%w: schema %d", msgwire.ErrMalformedHeader, b[0])
	}
	h.rtype, h.fetched = msgwire.ResponseType(b[1]), false // fetched: set by resolveStaged only
	if h.rtype > msgwire.UnaryResponse {
		return fmt.Errorf("%w: response type %d", msgwire.ErrMalformedHeader, b[1])
	}
	h.id = msgwire.ReadResponseID(b[2:])
	n := int(binary.LittleEndian.Uint16(b[18:]))
	rest := b[20:]
	if n > len(rest) || n > maxHandlerName {
		return fmt.Errorf("%w: handler name of %d bytes", msgwire.ErrMalformedHeader, n)
	}
	h.handler, rest = rest[:n], rest[n:]
	if len(rest) < 2 {
		return fmt.Errorf("%w: no headers length", msgwire.ErrMalformedHeader)
	}
	m := int(binary.LittleEndian.Uint16(rest))
	rest = rest[2:]
	if m != len(rest) || m > msgwire.MaxEncodedHeaders {
		return fmt.Errorf("%w: headers of %d bytes in %d", msgwire.ErrMalformedHeader, m, len(rest))
	}
	h.headers = rest
	return nil
}

// len is the size of the header that h was parsed from: parseRequestHeader
// takes nothing but these parts, so appendRequestHeader writes it again
// byte for byte.
func (h *requestHeader) len() int { return fixedHeaderLen + len(h.handler) + 2 + len(h.headers) }

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
func appendResponseHeader(dst []byte, id msgwire.ResponseID, outcome byte, headers []byte) []byte {
	dst = id.AppendLE(dst)
	dst = append(dst, outcome)
	dst = binary.LittleEndian.AppendUint16(dst, uint16(len(headers)))
	return append(dst, headers...)
}

// parseResponseHeader decodes a Response header. The header map aliases b.
// It is stricter than the reference, which reads any nonzero outcome as an
// error and ignores bytes after the map: neither is ever written.
func parseResponseHeader(b []byte) (id msgwire.ResponseID, outcome byte, headers []byte, err error) {
	if len(b) < responseHeaderLen {
		return id, 0, nil, fmt.Errorf("%w: response header of %d bytes", msgwire.ErrMalformedHeader, len(b))
	}
	id, outcome = msgwire.ReadResponseID(b), b[16]
	if outcome > outcomeErr {
		return id, 0, nil, fmt.Errorf("%w: response outcome %d", msgwire.ErrMalformedHeader, outcome)
	}
	n := int(binary.LittleEndian.Uint16(b[17:]))
	if n != len(b)-responseHeaderLen || n > msgwire.MaxEncodedHeaders {
		return id, 0, nil, fmt.Errorf("%w: response headers of %d bytes in %d", msgwire.ErrMalformedHeader, n, len(b)-responseHeaderLen)
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
func appendAckHeader(dst []byte, id msgwire.ResponseID, failed bool) []byte {
	flags := byte(0)
	if failed {
		flags = ackFlagError
	}
	return id.AppendLE(append(dst, flags))
}

// parseAckHeader decodes an Ack or Event header. Flag bits other than the
// two defined ones are refused, as the reference refuses them.
func parseAckHeader(b []byte) (flags byte, id msgwire.ResponseID, err error) {
	if len(b) != ackHeaderLen || b[0]&^(ackFlagEvent|ackFlagError) != 0 {
		return 0, id, fmt.Errorf("%w: ack header of %d bytes", msgwire.ErrMalformedHeader, len(b))
	}
	return b[0], msgwire.ReadResponseID(b[1:]), nil
}
