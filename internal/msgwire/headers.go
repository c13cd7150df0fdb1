package msgwire

import (
	"encoding/binary"
	"errors"
	"fmt"
	"sort"
	"unicode/utf8"

	"github.com/velo-go/velo/internal/mpread"
	"github.com/velo-go/velo/internal/mpwrite"
)

// MaxHeaderValue and MaxEncodedHeaders bound user headers: a value of at
// most MaxHeaderValue bytes, a call's whole map at most MaxEncodedHeaders
// bytes encoded.
const (
	MaxHeaderValue    = 1024
	MaxEncodedHeaders = 16 << 10
)

// ErrMalformedHeader wraps every header decoding failure.
var ErrMalformedHeader = errors.New("velo: malformed message header")

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
		b = AppendStr(b, k)
		b = AppendStr(b, h[k])
	}
	if len(b) > MaxEncodedHeaders {
		return nil, fmt.Errorf("velo: encoded headers of %d bytes exceed %d", len(b), MaxEncodedHeaders)
	}
	return b, nil
}

// AppendStr appends s as a MessagePack str (mpwrite's writer; header keys
// and values are short, see MaxHeaderValue).
func AppendStr(b []byte, s string) []byte { return mpwrite.AppendStr(b, s) }

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
