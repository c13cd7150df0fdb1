package queue

import (
	"bytes"

	"github.com/vmihailenco/msgpack/v5"
)

// Marshal encodes v as the Rust reference does (rmp_serde's to_vec): a
// struct becomes an array of its fields in order, integers take their
// smallest encoding, and floats keep their width.
func Marshal(v any) ([]byte, error) {
	var buf bytes.Buffer
	enc := msgpack.NewEncoder(&buf)
	enc.UseArrayEncodedStructs(true)
	enc.UseCompactInts(true)
	if err := enc.Encode(v); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

// Unmarshal decodes data made by Marshal (or by the Rust reference) into v.
// A struct is read from an array (by position) or from a map (by name).
func Unmarshal(data []byte, v any) error {
	return msgpack.Unmarshal(data, v)
}
