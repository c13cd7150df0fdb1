package queue

import "github.com/velo-go/velo/internal/msgpackcodec"

// Marshal encodes v as the Rust reference does (rmp_serde's to_vec): a
// struct becomes an array of its fields in order, integers take their
// smallest encoding, floats keep their width, and a nil slice or map is an
// empty one (a Rust Vec cannot read nil). It is the same codec as typed
// stream items use; docs/streams.md lists the whole mapping.
func Marshal(v any) ([]byte, error) { return msgpackcodec.Marshal(v) }

// Unmarshal decodes data made by Marshal (or by the Rust reference) into v.
// A struct is read from an array (by position) or from a map (by name).
// It is strict: integers must fit their type, and nothing may follow the
// value.
func Unmarshal(data []byte, v any) error { return msgpackcodec.Unmarshal(data, v) }
