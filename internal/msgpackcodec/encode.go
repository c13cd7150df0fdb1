package msgpackcodec

import (
	"bytes"
	"cmp"
	"fmt"
	"reflect"
	"slices"
	"sync"

	"github.com/vmihailenco/msgpack/v5"
)

// maxDepth bounds nesting, on both sides: a cyclic pointer graph fails to
// encode instead of overflowing the stack, and hostile input fails to
// decode. rmp_serde's default limit is the same order (1024).
const maxDepth = 1024

// Marshal returns the encoding of v, the bytes rmp_serde::to_vec writes for
// the matching Rust value (see the package comment for the mapping).
func Marshal(v any) ([]byte, error) { return Append(nil, v) }

// Append appends the encoding of v to dst. On error dst is returned as it
// was.
func Append(dst []byte, v any) ([]byte, error) {
	buf := bytes.NewBuffer(dst)
	e := msgpack.GetEncoder()
	defer msgpack.PutEncoder(e)
	e.Reset(buf)
	// A type's own EncodeMsgpack that calls e.Encode gets the same struct
	// and integer forms as the rest.
	e.UseArrayEncodedStructs(true)
	e.UseCompactInts(true)
	e.SetSortMapKeys(true)
	s := &encState{e: e}
	if err := s.value(reflect.ValueOf(v)); err != nil {
		return dst, fmt.Errorf("msgpackcodec: encode %T: %w", v, err)
	}
	return buf.Bytes(), nil
}

type encState struct {
	e     *msgpack.Encoder
	depth int
}

type encFn func(s *encState, v reflect.Value) error

func (s *encState) value(v reflect.Value) error {
	if !v.IsValid() {
		return s.e.EncodeNil()
	}
	return encoderOf(v.Type())(s, v)
}

// nest runs f one level deeper.
func (s *encState) nest(f func() error) error {
	if s.depth >= maxDepth {
		return fmt.Errorf("%w: nested deeper than %d (a cycle?)", ErrUnsupported, maxDepth)
	}
	s.depth++
	err := f()
	s.depth--
	return err
}

var encCache sync.Map // reflect.Type -> encFn

// encoderOf returns t's encoder, built once. A recursive type meets a
// stand-in that waits for the real encoder, as encoding/json does.
func encoderOf(t reflect.Type) encFn {
	if f, ok := encCache.Load(t); ok {
		return f.(encFn)
	}
	var (
		wg sync.WaitGroup
		f  encFn
	)
	wg.Add(1)
	stand, loaded := encCache.LoadOrStore(t, encFn(func(s *encState, v reflect.Value) error {
		wg.Wait()
		return f(s, v)
	}))
	if loaded {
		return stand.(encFn)
	}
	f = newEncoder(t)
	wg.Done()
	encCache.Store(t, f)
	return f
}

var (
	customEncoder = reflect.TypeFor[msgpack.CustomEncoder]()
	marshaler     = reflect.TypeFor[msgpack.Marshaler]()
)

func newEncoder(t reflect.Type) encFn {
	if f := ownEncoder(t); f != nil {
		return f
	}
	switch t.Kind() {
	case reflect.Bool:
		return func(s *encState, v reflect.Value) error { return s.e.EncodeBool(v.Bool()) }
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		return func(s *encState, v reflect.Value) error { return s.e.EncodeInt(v.Int()) }
	case reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64, reflect.Uintptr:
		return func(s *encState, v reflect.Value) error { return s.e.EncodeUint(v.Uint()) }
	case reflect.Float32:
		return func(s *encState, v reflect.Value) error { return s.e.EncodeFloat32(float32(v.Float())) }
	case reflect.Float64:
		return func(s *encState, v reflect.Value) error { return s.e.EncodeFloat64(v.Float()) }
	case reflect.String:
		return func(s *encState, v reflect.Value) error { return s.e.EncodeString(v.String()) }
	case reflect.Slice, reflect.Array:
		if t.Elem().Kind() == reflect.Uint8 {
			return encodeBin
		}
		return seqEncoder(t)
	case reflect.Map:
		return mapEncoder(t)
	case reflect.Pointer:
		return ptrEncoder(t)
	case reflect.Interface:
		return func(s *encState, v reflect.Value) error {
			if v.IsNil() {
				return s.e.EncodeNil()
			}
			return s.value(v.Elem())
		}
	case reflect.Struct:
		return structEncoder(t)
	}
	return failEncoder(fmt.Errorf("%w: %v", ErrUnsupported, t))
}

func failEncoder(err error) encFn {
	return func(*encState, reflect.Value) error { return err }
}

// ownEncoder returns an encoder for a type that encodes itself, through
// vmihailenco/msgpack's CustomEncoder or Marshaler, or nil.
func ownEncoder(t reflect.Type) encFn {
	switch {
	case t.Implements(customEncoder):
		return func(s *encState, v reflect.Value) error {
			if v.Kind() == reflect.Pointer && v.IsNil() {
				return s.e.EncodeNil()
			}
			return v.Interface().(msgpack.CustomEncoder).EncodeMsgpack(s.e)
		}
	case t.Implements(marshaler):
		return func(s *encState, v reflect.Value) error {
			if v.Kind() == reflect.Pointer && v.IsNil() {
				return s.e.EncodeNil()
			}
			b, err := v.Interface().(msgpack.Marshaler).MarshalMsgpack()
			if err != nil {
				return err
			}
			return s.e.Encode(msgpack.RawMessage(b))
		}
	case t.Kind() != reflect.Pointer && reflect.PointerTo(t).Implements(customEncoder),
		t.Kind() != reflect.Pointer && reflect.PointerTo(t).Implements(marshaler):
		viaPtr := ownEncoder(reflect.PointerTo(t))
		return func(s *encState, v reflect.Value) error {
			p := reflect.New(t)
			p.Elem().Set(v)
			return viaPtr(s, p)
		}
	}
	return nil
}

// encodeBin writes a byte slice or array as a binary, what serde_bytes and
// bytes::Bytes serialize to. A nil slice is an empty binary, not nil.
func encodeBin(s *encState, v reflect.Value) error {
	var b []byte
	if v.Kind() == reflect.Slice {
		b = v.Bytes()
	} else {
		b = make([]byte, v.Len())
		reflect.Copy(reflect.ValueOf(b), v)
	}
	if err := s.e.EncodeBytesLen(len(b)); err != nil {
		return err
	}
	_, err := s.e.Writer().Write(b)
	return err
}

// seqEncoder writes a slice or array as an array, as serde writes a Vec or
// a tuple. A nil slice is an empty array: a Rust Vec cannot read nil.
func seqEncoder(t reflect.Type) encFn {
	elem := encoderOf(t.Elem())
	return func(s *encState, v reflect.Value) error {
		n := v.Len()
		if err := s.e.EncodeArrayLen(n); err != nil {
			return err
		}
		return s.nest(func() error {
			for i := range n {
				if err := elem(s, v.Index(i)); err != nil {
					return err
				}
			}
			return nil
		})
	}
}

func ptrEncoder(t reflect.Type) encFn {
	elem := encoderOf(t.Elem())
	return func(s *encState, v reflect.Value) error {
		if v.IsNil() {
			return s.e.EncodeNil()
		}
		return s.nest(func() error { return elem(s, v.Elem()) })
	}
}

// mapEncoder writes a map with its keys in order (a Rust BTreeMap's order
// for strings and numbers), so that equal maps encode to equal bytes. A nil
// map is an empty map.
func mapEncoder(t reflect.Type) encFn {
	key, val := encoderOf(t.Key()), encoderOf(t.Elem())
	less := keyOrder(t.Key())
	return func(s *encState, v reflect.Value) error {
		keys := v.MapKeys()
		if less != nil {
			slices.SortFunc(keys, less)
		}
		if err := s.e.EncodeMapLen(len(keys)); err != nil {
			return err
		}
		return s.nest(func() error {
			for _, k := range keys {
				if err := key(s, k); err != nil {
					return err
				}
				if err := val(s, v.MapIndex(k)); err != nil {
					return err
				}
			}
			return nil
		})
	}
}

// keyOrder compares map keys of kind string, integer, float or bool; other
// key types keep Go's map order.
func keyOrder(t reflect.Type) func(a, b reflect.Value) int {
	switch t.Kind() {
	case reflect.String:
		return func(a, b reflect.Value) int { return cmp.Compare(a.String(), b.String()) }
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		return func(a, b reflect.Value) int { return cmp.Compare(a.Int(), b.Int()) }
	case reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64, reflect.Uintptr:
		return func(a, b reflect.Value) int { return cmp.Compare(a.Uint(), b.Uint()) }
	case reflect.Float32, reflect.Float64:
		return func(a, b reflect.Value) int { return cmp.Compare(a.Float(), b.Float()) }
	case reflect.Bool:
		return func(a, b reflect.Value) int {
			return cmp.Compare(boolInt(a.Bool()), boolInt(b.Bool()))
		}
	}
	return nil
}

func boolInt(b bool) int {
	if b {
		return 1
	}
	return 0
}

// structEncoder writes a struct as an array of its fields in declaration
// order, as rmp_serde::to_vec writes a Rust struct.
func structEncoder(t reflect.Type) encFn {
	fields, err := structFields(t)
	if err != nil {
		return failEncoder(err)
	}
	encs := make([]encFn, len(fields))
	for i, f := range fields {
		encs[i] = encoderOf(f.typ)
	}
	return func(s *encState, v reflect.Value) error {
		if err := s.e.EncodeArrayLen(len(fields)); err != nil {
			return err
		}
		return s.nest(func() error {
			for i, f := range fields {
				if err := encs[i](s, v.Field(f.index)); err != nil {
					return fmt.Errorf("%v.%s: %w", t, f.goName, err)
				}
			}
			return nil
		})
	}
}
