package msgpackcodec

import (
	"fmt"
	"math"
	"reflect"

	"github.com/vmihailenco/msgpack/v5/msgpcode"
)

// decodeAny reads a value for an `any`: nil, bool, int64 (uint64 above
// MaxInt64), float64, string, []byte, []any, or map[string]any.
func decodeAny(s *decState) (any, error) {
	c, err := s.peek()
	if err != nil {
		return nil, err
	}
	switch {
	case c == msgpcode.Nil:
		return nil, s.d.DecodeNil()
	case c == msgpcode.True || c == msgpcode.False:
		return s.d.DecodeBool()
	case isUintCode(c):
		u, err := s.d.DecodeUint64()
		if u <= math.MaxInt64 {
			return int64(u), err
		}
		return u, err
	case isIntCode(c):
		return s.d.DecodeInt64()
	case c == msgpcode.Float || c == msgpcode.Double:
		return s.d.DecodeFloat64()
	case msgpcode.IsString(c):
		var str string
		err := decodeStringInto(s, &str)
		return str, err
	case msgpcode.IsBin(c):
		return s.readBytes("a binary")
	case isArrayCode(c):
		return anyArray(s)
	case isMapCode(c):
		return anyMap(s)
	}
	return nil, fmt.Errorf("%w: %s in an any", ErrUnsupported, describe(c))
}

func decodeStringInto(s *decState, dst *string) error {
	return decodeString(s, reflect.ValueOf(dst).Elem())
}

func anyArray(s *decState) (any, error) {
	n, err := s.arrayLen("an array")
	if err != nil {
		return nil, err
	}
	out := make([]any, n)
	err = s.nest(func() error {
		for i := range out {
			if out[i], err = decodeAny(s); err != nil {
				return fmt.Errorf("[%d]: %w", i, err)
			}
		}
		return nil
	})
	return out, err
}

func anyMap(s *decState) (any, error) {
	n, err := s.d.DecodeMapLen()
	if err != nil {
		return nil, err
	}
	if err := s.fits(n, 2); err != nil {
		return nil, err
	}
	out := make(map[string]any, n)
	err = s.nest(func() error {
		for range n {
			c, err := s.peek()
			if err != nil {
				return err
			}
			if !msgpcode.IsString(c) {
				return fmt.Errorf("%w: a map key that is %s in an any (want a string)", ErrUnsupported, describe(c))
			}
			var k string
			if err := decodeStringInto(s, &k); err != nil {
				return err
			}
			if out[k], err = decodeAny(s); err != nil {
				return fmt.Errorf("[%q]: %w", k, err)
			}
		}
		return nil
	})
	return out, err
}
