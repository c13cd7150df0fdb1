// Package msgpackcodec is velo's one MessagePack codec, shared by typed
// stream items and queue items. It writes a Go value as the Rust reference
// writes the matching serde type with rmp_serde::to_vec (rmp-serde 1.x), so
// Go and Rust peers exchange the same bytes, and it reads strictly.
//
// The mapping, Go type to serde type:
//
//	bool, string                  bool, String (str, smallest header)
//	int8..int64, uint8..uint64    i8..u64, always in the smallest form
//	float32, float64              f32, f64 (width kept)
//	struct                        a struct: an array of the exported fields
//	                              in order (`msgpack:"-"` skips one; an
//	                              embedded struct is one nested field)
//	*T                            Option<T>: nil or the value
//	[]T, [N]T                     Vec<T>, tuple: an array (nil is empty)
//	[]byte, [N]byte               serde_bytes / bytes::Bytes: a binary
//	map[K]V                       a map, keys sorted (BTreeMap order); nil
//	                              is empty
//	named string constant         a unit enum variant (its name)
//	map[string]V with one entry   a newtype, tuple or struct enum variant
//	any                           whatever its dynamic value is
//
// A plain Rust Vec<u8> or [u8; N] is an array of integers: on the Go side use
// []uint16 (or mark the Rust field #[serde(with = "serde_bytes")]); a Go
// []byte reads either form. Types with a vmihailenco/msgpack CustomEncoder,
// CustomDecoder, Marshaler or Unmarshaler encode themselves. Channels,
// functions, complex numbers, `omitempty` tags and structs with only
// unexported fields (time.Time) are refused with ErrUnsupported.
//
// Reading accepts a struct as an array (by position, exactly one element
// per field) or as a map (by name, as rmp_serde::to_vec_named writes it).
package msgpackcodec
