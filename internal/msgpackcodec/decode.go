package msgpackcodec

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"math"
	"reflect"
	"sync"
	"unicode/utf8"

	"github.com/vmihailenco/msgpack/v5"
	"github.com/vmihailenco/msgpack/v5/msgpcode"
)

// ErrTrailingBytes is returned by Unmarshal for data that holds more than
// one value.
var ErrTrailingBytes = errors.New("trailing bytes after the value")

// ErrMismatch is returned by Unmarshal for a value of the wrong kind or
// size for the Go type: a string where an integer belongs, 300 for a uint8,
// an array of three for a struct of two fields.
var ErrMismatch = errors.New("value does not fit the type")

// Unmarshal decodes exactly one value from data into v, a non-nil pointer.
// It is strict where vmihailenco/msgpack is lenient: integers must fit,
// strings must be UTF-8, a struct's array must have one element per field,
// and nothing may follow the value. Errors match ErrMismatch,
// ErrTrailingBytes, ErrUnsupported or io.ErrUnexpectedEOF, and name the
// struct field they occurred in.
func Unmarshal(data []byte, v any) error {
	rv := reflect.ValueOf(v)
	if rv.Kind() != reflect.Pointer || rv.IsNil() {
		return fmt.Errorf("msgpackcodec: Unmarshal needs a non-nil pointer, not %T", v)
	}
	r := bytes.NewReader(data)
	d := msgpack.GetDecoder()
	defer msgpack.PutDecoder(d)
	d.Reset(r)
	s := &decState{d: d, r: r}
	if err := decoderOf(rv.Elem().Type())(s, rv.Elem()); err != nil {
		if errors.Is(err, io.EOF) {
			err = fmt.Errorf("%w (%v)", io.ErrUnexpectedEOF, err)
		}
		return fmt.Errorf("msgpackcodec: decode %v: %w", rv.Elem().Type(), err)
	}
	if n := r.Len(); n > 0 {
		return fmt.Errorf("msgpackcodec: decode %v: %w (%d)", rv.Elem().Type(), ErrTrailingBytes, n)
	}
	return nil
}

type decState struct {
	d     *msgpack.Decoder
	r     *bytes.Reader // what d reads, unbuffered: r.Len() is what is left
	depth int
}

type decFn func(s *decState, v reflect.Value) error

func (s *decState) peek() (byte, error) { return s.d.PeekCode() }

func (s *decState) nest(f func() error) error {
	if s.depth >= maxDepth {
		return fmt.Errorf("%w: nested deeper than %d", ErrUnsupported, maxDepth)
	}
	s.depth++
	err := f()
	s.depth--
	return err
}

// fits refuses a length header that claims more elements than bytes are
// left (each element takes at least one), before anything is allocated.
func (s *decState) fits(n, per int) error {
	if n > s.r.Len()/per {
		return fmt.Errorf("%w: a length of %d with %d bytes left", io.ErrUnexpectedEOF, n, s.r.Len())
	}
	return nil
}

func mismatch(want string, c byte) error {
	return fmt.Errorf("%w: want %s, got %s", ErrMismatch, want, describe(c))
}

var decCache sync.Map // reflect.Type -> decFn

func decoderOf(t reflect.Type) decFn {
	if f, ok := decCache.Load(t); ok {
		return f.(decFn)
	}
	var (
		wg sync.WaitGroup
		f  decFn
	)
	wg.Add(1)
	stand, loaded := decCache.LoadOrStore(t, decFn(func(s *decState, v reflect.Value) error {
		wg.Wait()
		return f(s, v)
	}))
	if loaded {
		return stand.(decFn)
	}
	f = newDecoder(t)
	wg.Done()
	decCache.Store(t, f)
	return f
}

var (
	customDecoder = reflect.TypeFor[msgpack.CustomDecoder]()
	unmarshaler   = reflect.TypeFor[msgpack.Unmarshaler]()
)

func newDecoder(t reflect.Type) decFn {
	if f := ownDecoder(t); f != nil {
		return f
	}
	switch t.Kind() {
	case reflect.Bool:
		return decodeBool
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		return decodeInt
	case reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64, reflect.Uintptr:
		return decodeUint
	case reflect.Float32, reflect.Float64:
		return decodeFloat
	case reflect.String:
		return decodeString
	case reflect.Slice, reflect.Array:
		return seqDecoder(t)
	case reflect.Map:
		return mapDecoder(t)
	case reflect.Pointer:
		return ptrDecoder(t)
	case reflect.Interface:
		if t.NumMethod() == 0 {
			return func(s *decState, v reflect.Value) error {
				x, err := decodeAny(s)
				if err == nil && x != nil {
					v.Set(reflect.ValueOf(x))
				} else if err == nil {
					v.SetZero()
				}
				return err
			}
		}
	case reflect.Struct:
		return structDecoder(t)
	}
	return func(*decState, reflect.Value) error { return fmt.Errorf("%w: %v", ErrUnsupported, t) }
}

// ownDecoder returns a decoder for a type whose pointer decodes itself
// through vmihailenco/msgpack's CustomDecoder or Unmarshaler, or nil.
func ownDecoder(t reflect.Type) decFn {
	pt := reflect.PointerTo(t)
	switch {
	case pt.Implements(customDecoder):
		return func(s *decState, v reflect.Value) error {
			return v.Addr().Interface().(msgpack.CustomDecoder).DecodeMsgpack(s.d)
		}
	case pt.Implements(unmarshaler):
		return func(s *decState, v reflect.Value) error {
			raw, err := s.d.DecodeRaw()
			if err != nil {
				return err
			}
			return v.Addr().Interface().(msgpack.Unmarshaler).UnmarshalMsgpack(raw)
		}
	}
	return nil
}

func isUintCode(c byte) bool {
	return c <= msgpcode.PosFixedNumHigh || c == msgpcode.Uint8 || c == msgpcode.Uint16 ||
		c == msgpcode.Uint32 || c == msgpcode.Uint64
}

func isIntCode(c byte) bool {
	return c >= msgpcode.NegFixedNumLow || c == msgpcode.Int8 || c == msgpcode.Int16 ||
		c == msgpcode.Int32 || c == msgpcode.Int64
}

func decodeBool(s *decState, v reflect.Value) error {
	c, err := s.peek()
	if err != nil {
		return err
	}
	if c != msgpcode.True && c != msgpcode.False {
		return mismatch("a bool", c)
	}
	b, err := s.d.DecodeBool()
	v.SetBool(b)
	return err
}

func decodeInt(s *decState, v reflect.Value) error {
	c, err := s.peek()
	if err != nil {
		return err
	}
	var n int64
	switch {
	case isUintCode(c):
		u, err := s.d.DecodeUint64()
		if err != nil {
			return err
		}
		if u > math.MaxInt64 {
			return fmt.Errorf("%w: %d overflows %v", ErrMismatch, u, v.Type())
		}
		n = int64(u)
	case isIntCode(c):
		if n, err = s.d.DecodeInt64(); err != nil {
			return err
		}
	default:
		return mismatch("an integer", c)
	}
	if v.OverflowInt(n) {
		return fmt.Errorf("%w: %d overflows %v", ErrMismatch, n, v.Type())
	}
	v.SetInt(n)
	return nil
}

func decodeUint(s *decState, v reflect.Value) error {
	c, err := s.peek()
	if err != nil {
		return err
	}
	var u uint64
	switch {
	case isUintCode(c):
		if u, err = s.d.DecodeUint64(); err != nil {
			return err
		}
	case isIntCode(c):
		n, err := s.d.DecodeInt64()
		if err != nil {
			return err
		}
		if n < 0 {
			return fmt.Errorf("%w: %d is negative for %v", ErrMismatch, n, v.Type())
		}
		u = uint64(n)
	default:
		return mismatch("an integer", c)
	}
	if v.OverflowUint(u) {
		return fmt.Errorf("%w: %d overflows %v", ErrMismatch, u, v.Type())
	}
	v.SetUint(u)
	return nil
}

// decodeFloat reads a float of either width, or an integer, as serde's
// float visitors accept.
func decodeFloat(s *decState, v reflect.Value) error {
	c, err := s.peek()
	if err != nil {
		return err
	}
	if c != msgpcode.Float && c != msgpcode.Double && !isUintCode(c) && !isIntCode(c) {
		return mismatch("a float", c)
	}
	f, err := s.d.DecodeFloat64()
	v.SetFloat(f)
	return err
}

// readBytes reads a str or bin of at most the bytes left, aliasing nothing.
func (s *decState) readBytes(want string) ([]byte, error) {
	c, err := s.peek()
	if err != nil {
		return nil, err
	}
	if !msgpcode.IsString(c) && !msgpcode.IsBin(c) {
		return nil, mismatch(want, c)
	}
	n, err := s.d.DecodeBytesLen()
	if err != nil {
		return nil, err
	}
	if err := s.fits(n, 1); err != nil {
		return nil, err
	}
	b := make([]byte, n)
	_, err = io.ReadFull(s.r, b)
	return b, err
}

func decodeString(s *decState, v reflect.Value) error {
	b, err := s.readBytes("a string")
	if err != nil {
		return err
	}
	if !utf8.Valid(b) {
		return fmt.Errorf("%w: the string is not UTF-8", ErrMismatch)
	}
	v.SetString(string(b))
	return nil
}
