package protocol

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
)

// Body limits of the core routes. A hub refuses a longer body with
// CodePayloadTooLarge before it decodes any of it.
const (
	// MaxRegisterBody bounds POST /v1/instances: a peer and the payloads
	// of every extension.
	MaxRegisterBody = 1 << 20
	// MaxSmallBody bounds the other core bodies (heartbeat, probe), which
	// carry nothing the hub reads.
	MaxSmallBody = 4 << 10
)

// ReadBody reads r to its end, at most limit bytes. A longer body answers
// a CodePayloadTooLarge Error after reading limit+1 bytes, so the cost of
// a large body is bounded by the limit.
func ReadBody(r io.Reader, limit int64) ([]byte, error) {
	b, err := io.ReadAll(io.LimitReader(r, limit+1))
	if err != nil {
		return nil, badRequestf("reading body: %v", err)
	}
	if int64(len(b)) > limit {
		return nil, Errorf(CodePayloadTooLarge, "body is longer than %d bytes", limit)
	}
	return b, nil
}

// DecodeJSON reads one JSON value from b into v. Unknown fields are
// ignored, so a newer client can talk to an older hub; anything after the
// value is refused. Errors are CodeBadRequest Errors.
func DecodeJSON(b []byte, v any) error {
	dec := json.NewDecoder(bytes.NewReader(b))
	if err := dec.Decode(v); err != nil {
		return badRequestf("body is not valid JSON for this route: %v", err)
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return badRequestf("body has data after its JSON value")
	}
	return nil
}

// DecodeRegisterRequest decodes and validates a register body: the peer is
// present with a non-zero instance id, every extension name is valid, and
// a null payload is dropped (it means the registrant did not opt in).
// Errors are CodeBadRequest Errors.
func DecodeRegisterRequest(b []byte) (RegisterRequest, error) {
	var req RegisterRequest
	if err := DecodeJSON(b, &req); err != nil {
		return RegisterRequest{}, err
	}
	return req, req.Validate()
}

// Validate checks a RegisterRequest as DecodeRegisterRequest does, and
// drops null payloads.
func (r *RegisterRequest) Validate() error {
	if r.Peer.InstanceID.IsZero() {
		return badRequestf("register: peer.instance_id is missing")
	}
	for name, payload := range r.Extensions {
		if err := ValidateExtensionName(name); err != nil {
			return err
		}
		if len(payload) == 0 || string(payload) == "null" {
			delete(r.Extensions, name)
		}
	}
	if p, ok := r.Extensions[ServicesExtension]; ok {
		if _, err := DecodeServicesPayload(p); err != nil {
			return err
		}
	}
	return nil
}

// DecodeServicesPayload decodes the services payload and validates each
// name. Duplicates are refused: the payload is a set.
func DecodeServicesPayload(b []byte) (ServicesPayload, error) {
	var p ServicesPayload
	if err := DecodeJSON(b, &p); err != nil {
		return ServicesPayload{}, err
	}
	seen := make(map[string]struct{}, len(p.Names))
	for _, n := range p.Names {
		if err := ValidateServiceName(n); err != nil {
			return ServicesPayload{}, err
		}
		if _, dup := seen[n]; dup {
			return ServicesPayload{}, badRequestf("services payload names %q twice", n)
		}
		seen[n] = struct{}{}
	}
	return p, nil
}
