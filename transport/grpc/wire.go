package grpc

import (
	"errors"
	"fmt"

	"google.golang.org/grpc/mem"
	"google.golang.org/protobuf/encoding/protowire"

	"github.com/velo-go/velo/ext"
	"github.com/velo-go/velo/internal/frame"
)

// The names the Rust reference (0.9) gives its service in
// lib/velo/proto/velo.proto: package velo.streaming.v1, service
// VeloStreaming, one bidirectional method Stream whose messages, both
// ways, are FramedData.
const (
	ServiceName = "velo.streaming.v1.VeloStreaming"
	MethodName  = "Stream"
	// FullMethod is the HTTP/2 path a client opens the stream on.
	FullMethod = "/" + ServiceName + "/" + MethodName
)

// The field numbers of FramedData. Each field is proto3 bytes; the
// preamble is the 11-byte prefix of a TCP frame (version, type, header
// length, payload length), the header and payload follow as they would on
// TCP, without being concatenated.
const (
	fieldPreamble protowire.Number = 1
	fieldHeader   protowire.Number = 2
	fieldPayload  protowire.Number = 3
)

// ErrMalformed wraps every FramedData message that does not hold a frame.
var ErrMalformed = errors.New("grpc: malformed FramedData")

// AppendFramedData appends f encoded as a FramedData message. Empty fields
// are left out, as proto3 (and so the reference) writes them.
func AppendFramedData(dst []byte, f ext.Frame) []byte {
	var pre [frame.PreambleLen]byte
	frame.PutPreamble(pre[:], f.Type, len(f.Header), len(f.Payload))
	dst = protowire.AppendTag(dst, fieldPreamble, protowire.BytesType)
	dst = protowire.AppendBytes(dst, pre[:])
	if len(f.Header) > 0 {
		dst = protowire.AppendTag(dst, fieldHeader, protowire.BytesType)
		dst = protowire.AppendBytes(dst, f.Header)
	}
	if len(f.Payload) > 0 {
		dst = protowire.AppendTag(dst, fieldPayload, protowire.BytesType)
		dst = protowire.AppendBytes(dst, f.Payload)
	}
	return dst
}

// framedSize is the encoded size of f, so the message is allocated once.
func framedSize(f ext.Frame) int {
	n := 1 + protowire.SizeBytes(frame.PreambleLen)
	if len(f.Header) > 0 {
		n += 1 + protowire.SizeBytes(len(f.Header))
	}
	if len(f.Payload) > 0 {
		n += 1 + protowire.SizeBytes(len(f.Payload))
	}
	return n
}

// ParseFramedData reads a FramedData message into a frame whose slices
// alias b. Unknown fields are skipped and a repeated field's last value
// wins, as protobuf decoders do; the preamble must be a valid one whose
// lengths match the header and payload, within max.
func ParseFramedData(b []byte, max int) (ext.Frame, error) {
	var pre, header, payload []byte
	havePre := false
	for len(b) > 0 {
		num, typ, n := protowire.ConsumeTag(b)
		if n < 0 {
			return ext.Frame{}, fmt.Errorf("%w: %v", ErrMalformed, protowire.ParseError(n))
		}
		b = b[n:]
		if typ != protowire.BytesType || num < fieldPreamble || num > fieldPayload {
			n = protowire.ConsumeFieldValue(num, typ, b)
			if n < 0 {
				return ext.Frame{}, fmt.Errorf("%w: field %d: %v", ErrMalformed, num, protowire.ParseError(n))
			}
			b = b[n:]
			continue
		}
		v, n := protowire.ConsumeBytes(b)
		if n < 0 {
			return ext.Frame{}, fmt.Errorf("%w: field %d: %v", ErrMalformed, num, protowire.ParseError(n))
		}
		b = b[n:]
		switch num {
		case fieldPreamble:
			pre, havePre = v, true
		case fieldHeader:
			header = v
		case fieldPayload:
			payload = v
		}
	}
	if !havePre {
		return ext.Frame{}, fmt.Errorf("%w: no preamble", ErrMalformed)
	}
	if len(pre) != frame.PreambleLen {
		return ext.Frame{}, fmt.Errorf("%w: preamble of %d bytes", ErrMalformed, len(pre))
	}
	p, err := frame.ParsePreamble(pre, max)
	if err != nil {
		return ext.Frame{}, err
	}
	if p.HeaderLen != len(header) || p.PayloadLen != len(payload) {
		return ext.Frame{}, fmt.Errorf("%w: preamble says %d+%d bytes, message holds %d+%d",
			ErrMalformed, p.HeaderLen, p.PayloadLen, len(header), len(payload))
	}
	return ext.Frame{Type: p.Type, Header: header, Payload: payload}, nil
}

// message is what the codec carries: out is an encoded FramedData to
// send, in the bytes of one received.
type message struct {
	out []byte
	in  []byte
}

// codec hands grpc-go bytes this package encodes itself, so no generated
// code is needed. It is forced on both ends rather than registered, so it
// does not replace grpc-go's own "proto" codec for the rest of the
// process; its name makes the content type application/grpc+proto, which
// the reference's tonic server and client accept.
type codec struct{}

func (codec) Name() string { return "proto" }

func (codec) Marshal(v any) (mem.BufferSlice, error) {
	m, ok := v.(*message)
	if !ok {
		return nil, fmt.Errorf("grpc: codec cannot marshal %T", v)
	}
	return mem.BufferSlice{mem.SliceBuffer(m.out)}, nil
}

func (codec) Unmarshal(data mem.BufferSlice, v any) error {
	m, ok := v.(*message)
	if !ok {
		return fmt.Errorf("grpc: codec cannot unmarshal into %T", v)
	}
	// A copy the frame may keep: grpc-go reuses data's buffers.
	m.in = data.Materialize()
	return nil
}
