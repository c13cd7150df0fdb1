package grpc

import (
	"fmt"
	"os"
	"strconv"
	"strings"

	"google.golang.org/grpc/metadata"
	"google.golang.org/protobuf/encoding/protowire"

	"github.com/velo-go/velo/ext"
)

// The wire of the gRPC frame transport ("grpc-stream"), as the Rust
// reference's grpc_transport.rs has it: the same service and message as
// the messenger transport, one FramedData per stream frame with the
// preamble and header left empty and the frame in payload, and the
// stream's route in two metadata entries, decimal u64 strings.
const (
	// AnchorIDMetadata carries the route's anchor local id.
	AnchorIDMetadata = "x-anchor-id"
	// SessionIDMetadata carries the route's routing session.
	SessionIDMetadata = "x-session-id"
)

// AppendStreamFrame appends the FramedData message of one stream frame:
// only its payload field, which proto3 leaves out when empty.
func AppendStreamFrame(dst, payload []byte) []byte {
	if len(payload) == 0 {
		return dst
	}
	dst = protowire.AppendTag(dst, fieldPayload, protowire.BytesType)
	return protowire.AppendBytes(dst, payload)
}

// streamFrameSize is the encoded size of a stream frame's message.
func streamFrameSize(payload []byte) int {
	if len(payload) == 0 {
		return 0
	}
	return 1 + protowire.SizeBytes(len(payload))
}

// ParseStreamFrame returns the payload of a FramedData message, a slice
// of b. The preamble and header are ignored, as the reference's server
// does; unknown fields are skipped, and a repeated field's last value
// wins. A payload over max is refused.
func ParseStreamFrame(b []byte, max int) ([]byte, error) {
	var payload []byte
	for len(b) > 0 {
		num, typ, n := protowire.ConsumeTag(b)
		if n < 0 {
			return nil, fmt.Errorf("%w: %v", ErrMalformed, protowire.ParseError(n))
		}
		b = b[n:]
		if num != fieldPayload || typ != protowire.BytesType {
			n = protowire.ConsumeFieldValue(num, typ, b)
			if n < 0 {
				return nil, fmt.Errorf("%w: field %d: %v", ErrMalformed, num, protowire.ParseError(n))
			}
			b = b[n:]
			continue
		}
		v, n := protowire.ConsumeBytes(b)
		if n < 0 {
			return nil, fmt.Errorf("%w: payload: %v", ErrMalformed, protowire.ParseError(n))
		}
		b = b[n:]
		payload = v
	}
	if len(payload) > max {
		return nil, fmt.Errorf("%w: a %d-byte frame, over %d", ErrMalformed, len(payload), max)
	}
	return payload, nil
}

// RouteMetadata is the metadata that names route.
func RouteMetadata(route ext.StreamRoute) metadata.MD {
	return metadata.Pairs(
		AnchorIDMetadata, strconv.FormatUint(route.AnchorID, 10),
		SessionIDMetadata, strconv.FormatUint(route.SessionID, 10),
	)
}

// ParseRouteMetadata reads the route out of a stream's metadata. A
// missing entry, or one that is not a decimal u64, is an error (the
// server answers it InvalidArgument).
func ParseRouteMetadata(md metadata.MD) (ext.StreamRoute, error) {
	a, err := u64Metadata(md, AnchorIDMetadata)
	if err != nil {
		return ext.StreamRoute{}, err
	}
	s, err := u64Metadata(md, SessionIDMetadata)
	if err != nil {
		return ext.StreamRoute{}, err
	}
	return ext.StreamRoute{AnchorID: a, SessionID: s}, nil
}

func u64Metadata(md metadata.MD, key string) (uint64, error) {
	vs := md.Get(key)
	if len(vs) == 0 {
		return 0, fmt.Errorf("%w: missing %s metadata", ext.ErrMalformedStream, key)
	}
	// Rust's str::parse::<u64>, which the reference uses, takes one
	// leading '+'; ParseUint does not.
	v, err := strconv.ParseUint(strings.TrimPrefix(vs[0], "+"), 10, 64)
	if err == nil && strings.HasPrefix(vs[0], "++") {
		err = strconv.ErrSyntax
	}
	if err != nil {
		return 0, fmt.Errorf("%w: %s is not a valid u64", ext.ErrMalformedStream, key)
	}
	return v, nil
}

// errDeadline is a passed read deadline: it matches os.ErrDeadlineExceeded.
var errDeadline error = deadlineError{}

type deadlineError struct{}

func (deadlineError) Error() string   { return "grpc-stream: read deadline exceeded" }
func (deadlineError) Timeout() bool   { return true }
func (deadlineError) Is(e error) bool { return e == os.ErrDeadlineExceeded }
