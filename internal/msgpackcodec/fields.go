package msgpackcodec

import (
	"errors"
	"fmt"
	"reflect"
	"strings"
)

// ErrUnsupported is returned for a Go type that has no serde counterpart
// here (channels, functions, complex numbers, a struct with only unexported
// fields such as time.Time), and for values nested too deeply.
var ErrUnsupported = errors.New("unsupported type")

type field struct {
	index  int          // in the Go struct
	name   string       // in a map-form struct: the msgpack tag or the Go name
	goName string       // for errors
	typ    reflect.Type // the field's type
}

// structFields lists the fields a struct encodes, in declaration order:
// exported fields not tagged `msgpack:"-"`. An embedded struct is one field
// (a nested array), as a Rust struct without #[serde(flatten)] has it.
func structFields(t reflect.Type) ([]field, error) {
	var out []field
	unexported := 0
	for i := range t.NumField() {
		sf := t.Field(i)
		if !sf.IsExported() {
			unexported++
			continue
		}
		tag := sf.Tag.Get("msgpack")
		name, opts, _ := strings.Cut(tag, ",")
		if name == "-" {
			continue
		}
		if strings.Contains(","+opts+",", ",omitempty,") {
			return nil, fmt.Errorf("%w: %v.%s: omitempty would shift the fields after it", ErrUnsupported, t, sf.Name)
		}
		if name == "" {
			name = sf.Name
		}
		out = append(out, field{index: i, name: name, goName: sf.Name, typ: sf.Type})
	}
	if len(out) == 0 && unexported > 0 {
		// time.Time and friends: an empty array would lose the value.
		return nil, fmt.Errorf("%w: %v has only unexported fields", ErrUnsupported, t)
	}
	return out, nil
}
