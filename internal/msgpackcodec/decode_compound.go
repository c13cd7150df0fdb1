package msgpackcodec

import (
	"fmt"
	"reflect"

	"github.com/vmihailenco/msgpack/v5/msgpcode"
)

func isArrayCode(c byte) bool {
	return msgpcode.IsFixedArray(c) || c == msgpcode.Array16 || c == msgpcode.Array32
}

func isMapCode(c byte) bool {
	return msgpcode.IsFixedMap(c) || c == msgpcode.Map16 || c == msgpcode.Map32
}

// arrayLen reads an array header that fits in what is left.
func (s *decState) arrayLen(want string) (int, error) {
	c, err := s.peek()
	if err != nil {
		return 0, err
	}
	if !isArrayCode(c) {
		return 0, mismatch(want, c)
	}
	n, err := s.d.DecodeArrayLen()
	if err != nil {
		return 0, err
	}
	return n, s.fits(n, 1)
}

// seqDecoder reads a slice or array. A byte slice or array reads a binary
// (what it encodes to) or an array of small integers (a plain Rust
// Vec<u8>); a nil reads as a nil slice.
func seqDecoder(t reflect.Type) decFn {
	elem := decoderOf(t.Elem())
	bytesLike := t.Elem().Kind() == reflect.Uint8
	return func(s *decState, v reflect.Value) error {
		c, err := s.peek()
		if err != nil {
			return err
		}
		switch {
		case c == msgpcode.Nil && t.Kind() == reflect.Slice:
			v.SetZero()
			return s.d.DecodeNil()
		case bytesLike && (msgpcode.IsBin(c) || msgpcode.IsString(c)):
			b, err := s.readBytes("a binary")
			if err != nil {
				return err
			}
			return setBytes(v, b)
		}
		n, err := s.arrayLen("an array")
		if err != nil {
			return err
		}
		if t.Kind() == reflect.Array && n != t.Len() {
			return fmt.Errorf("%w: an array of %d for %v", ErrMismatch, n, t)
		}
		if t.Kind() == reflect.Slice {
			v.Set(reflect.MakeSlice(t, n, n))
		}
		return s.nest(func() error {
			for i := range n {
				if err := elem(s, v.Index(i)); err != nil {
					return fmt.Errorf("[%d]: %w", i, err)
				}
			}
			return nil
		})
	}
}

func setBytes(v reflect.Value, b []byte) error {
	if v.Kind() == reflect.Slice {
		v.SetBytes(b)
		return nil
	}
	if len(b) != v.Len() {
		return fmt.Errorf("%w: a binary of %d for %v", ErrMismatch, len(b), v.Type())
	}
	reflect.Copy(v, reflect.ValueOf(b))
	return nil
}

// mapDecoder reads a map; a nil reads as a nil map. A repeated key keeps
// its last value, as a Rust map does.
func mapDecoder(t reflect.Type) decFn {
	key, val := decoderOf(t.Key()), decoderOf(t.Elem())
	return func(s *decState, v reflect.Value) error {
		c, err := s.peek()
		if err != nil {
			return err
		}
		if c == msgpcode.Nil {
			v.SetZero()
			return s.d.DecodeNil()
		}
		if !isMapCode(c) {
			return mismatch("a map", c)
		}
		n, err := s.d.DecodeMapLen()
		if err != nil {
			return err
		}
		if err := s.fits(n, 2); err != nil {
			return err
		}
		m := reflect.MakeMapWithSize(t, n)
		err = s.nest(func() error {
			for range n {
				k, e := reflect.New(t.Key()).Elem(), reflect.New(t.Elem()).Elem()
				if err := key(s, k); err != nil {
					return fmt.Errorf("map key: %w", err)
				}
				if err := val(s, e); err != nil {
					return fmt.Errorf("[%v]: %w", k, err)
				}
				m.SetMapIndex(k, e)
			}
			return nil
		})
		v.Set(m)
		return err
	}
}

func ptrDecoder(t reflect.Type) decFn {
	elem := decoderOf(t.Elem())
	return func(s *decState, v reflect.Value) error {
		c, err := s.peek()
		if err != nil {
			return err
		}
		if c == msgpcode.Nil {
			v.SetZero()
			return s.d.DecodeNil()
		}
		p := reflect.New(t.Elem())
		if err := s.nest(func() error { return elem(s, p.Elem()) }); err != nil {
			return err
		}
		v.Set(p)
		return nil
	}
}

// structDecoder reads a struct from an array with one element per field
// (what rmp_serde::to_vec writes) or from a map keyed by field name (what
// to_vec_named writes; unknown names are skipped, as serde does).
func structDecoder(t reflect.Type) decFn {
	fields, err := structFields(t)
	if err != nil {
		return func(*decState, reflect.Value) error { return err }
	}
	decs := make([]decFn, len(fields))
	byName := make(map[string]int, len(fields))
	for i, f := range fields {
		decs[i] = decoderOf(f.typ)
		byName[f.name] = i
	}
	field := func(s *decState, v reflect.Value, i int) error {
		if err := decs[i](s, v.Field(fields[i].index)); err != nil {
			return fmt.Errorf("%v.%s: %w", t, fields[i].goName, err)
		}
		return nil
	}
	return func(s *decState, v reflect.Value) error {
		c, err := s.peek()
		if err != nil {
			return err
		}
		if isMapCode(c) {
			return s.nest(func() error { return decodeNamed(s, v, byName, field) })
		}
		n, err := s.arrayLen(fmt.Sprintf("an array of %d (struct %v)", len(fields), t))
		if err != nil {
			return err
		}
		if n != len(fields) {
			return fmt.Errorf("%w: an array of %d for %v, which has %d fields", ErrMismatch, n, t, len(fields))
		}
		return s.nest(func() error {
			for i := range fields {
				if err := field(s, v, i); err != nil {
					return err
				}
			}
			return nil
		})
	}
}

func decodeNamed(s *decState, v reflect.Value, byName map[string]int, field func(*decState, reflect.Value, int) error) error {
	n, err := s.d.DecodeMapLen()
	if err != nil {
		return err
	}
	if err := s.fits(n, 2); err != nil {
		return err
	}
	for range n {
		name, err := s.readBytes("a field name")
		if err != nil {
			return err
		}
		i, ok := byName[string(name)]
		if !ok {
			if err := s.d.Skip(); err != nil {
				return err
			}
			continue
		}
		if err := field(s, v, i); err != nil {
			return err
		}
	}
	return nil
}
