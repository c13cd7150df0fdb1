package msgpackcodec

import (
	"errors"
	"fmt"
	"reflect"
)

// Check reports whether values of type t can be encoded and decoded, as
// far as the type tells: it refuses what always fails (a channel, a
// struct field of an unsupported type), not what depends on a value (a
// cycle, an unsupported dynamic type in an any).
func Check(t reflect.Type) error {
	return check(t, map[reflect.Type]bool{})
}

func check(t reflect.Type, seen map[reflect.Type]bool) error {
	if seen[t] || ownEncoder(t) != nil || ownDecoder(t) != nil {
		return nil
	}
	seen[t] = true
	switch t.Kind() {
	case reflect.Chan, reflect.Func, reflect.Complex64, reflect.Complex128, reflect.UnsafePointer:
		return fmt.Errorf("%w: %v", ErrUnsupported, t)
	case reflect.Interface:
		if t.NumMethod() > 0 {
			return fmt.Errorf("%w: %v (an interface with methods)", ErrUnsupported, t)
		}
	case reflect.Slice, reflect.Array, reflect.Pointer:
		return check(t.Elem(), seen)
	case reflect.Map:
		return errors.Join(check(t.Key(), seen), check(t.Elem(), seen))
	case reflect.Struct:
		fields, err := structFields(t)
		if err != nil {
			return err
		}
		for _, f := range fields {
			if err := check(f.typ, seen); err != nil {
				return err
			}
		}
	}
	return nil
}
