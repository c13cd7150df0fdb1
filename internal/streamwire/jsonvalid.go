package streamwire

// validJSON reports whether b is one JSON value with optional whitespace
// around it: exactly what encoding/json.Valid reports (a fuzz target holds
// the two together), in one pass without the state machine's call per
// byte. The attach bodies are checked on the path of every stream's setup.
func validJSON(b []byte) bool {
	v := jsonValidator{b: b}
	v.space()
	if !v.value(0) {
		return false
	}
	v.space()
	return v.i == len(b)
}

// maxJSONDepth is encoding/json's nesting limit: deeper input is invalid.
const maxJSONDepth = 10000

type jsonValidator struct {
	b []byte
	i int
}

func (v *jsonValidator) space() {
	for v.i < len(v.b) {
		switch v.b[v.i] {
		case ' ', '\t', '\n', '\r':
			v.i++
		default:
			return
		}
	}
}

func (v *jsonValidator) value(depth int) bool {
	if v.i >= len(v.b) {
		return false
	}
	switch c := v.b[v.i]; {
	case c == '{':
		return v.object(depth + 1)
	case c == '[':
		return v.array(depth + 1)
	case c == '"':
		return v.str()
	case c == '-' || (c >= '0' && c <= '9'):
		return v.number()
	case c == 't':
		return v.word("true")
	case c == 'f':
		return v.word("false")
	case c == 'n':
		return v.word("null")
	}
	return false
}

func (v *jsonValidator) word(w string) bool {
	if len(v.b)-v.i < len(w) || string(v.b[v.i:v.i+len(w)]) != w {
		return false
	}
	v.i += len(w)
	return true
}

func (v *jsonValidator) object(depth int) bool {
	return v.list(depth, '}', func() bool {
		if v.i >= len(v.b) || v.b[v.i] != '"' || !v.str() {
			return false
		}
		v.space()
		if v.i >= len(v.b) || v.b[v.i] != ':' {
			return false
		}
		v.i++
		v.space()
		return v.value(depth)
	})
}

func (v *jsonValidator) array(depth int) bool {
	return v.list(depth, ']', func() bool { return v.value(depth) })
}

// list reads the members of an object or the items of an array, each by
// item, separated by commas, up to close; the opening byte is at v.i.
func (v *jsonValidator) list(depth int, close byte, item func() bool) bool {
	if depth > maxJSONDepth {
		return false
	}
	v.i++ // '{' or '['
	v.space()
	if v.i < len(v.b) && v.b[v.i] == close {
		v.i++
		return true
	}
	for {
		if !item() {
			return false
		}
		v.space()
		if v.i >= len(v.b) {
			return false
		}
		switch v.b[v.i] {
		case ',':
			v.i++
			v.space()
		case close:
			v.i++
			return true
		default:
			return false
		}
	}
}

// str reads a string: no control characters, and only the escapes JSON
// has. Like encoding/json, it does not check UTF-8 (jsonObject does).
func (v *jsonValidator) str() bool {
	v.i++ // '"'
	for v.i < len(v.b) {
		c := v.b[v.i]
		switch {
		case c == '"':
			v.i++
			return true
		case c < 0x20:
			return false
		case c == '\\':
			v.i++
			if v.i >= len(v.b) {
				return false
			}
			switch v.b[v.i] {
			case '"', '\\', '/', 'b', 'f', 'n', 'r', 't':
				v.i++
			case 'u':
				if len(v.b)-v.i < 5 {
					return false
				}
				for _, h := range v.b[v.i+1 : v.i+5] {
					if !isHex(h) {
						return false
					}
				}
				v.i += 5
			default:
				return false
			}
		default:
			v.i++
		}
	}
	return false
}

func isHex(c byte) bool {
	return c >= '0' && c <= '9' || c >= 'a' && c <= 'f' || c >= 'A' && c <= 'F'
}

// number reads -?(0|[1-9][0-9]*)(\.[0-9]+)?([eE][+-]?[0-9]+)?
func (v *jsonValidator) number() bool {
	if v.b[v.i] == '-' {
		v.i++
	}
	if v.i >= len(v.b) {
		return false
	}
	switch c := v.b[v.i]; {
	case c == '0':
		v.i++
	case c >= '1' && c <= '9':
		v.digits()
	default:
		return false
	}
	if v.i < len(v.b) && v.b[v.i] == '.' {
		v.i++
		if !v.digits() {
			return false
		}
	}
	if v.i < len(v.b) && (v.b[v.i] == 'e' || v.b[v.i] == 'E') {
		v.i++
		if v.i < len(v.b) && (v.b[v.i] == '+' || v.b[v.i] == '-') {
			v.i++
		}
		if !v.digits() {
			return false
		}
	}
	return true
}

// digits reads one or more digits; false for none.
func (v *jsonValidator) digits() bool {
	start := v.i
	for v.i < len(v.b) && v.b[v.i] >= '0' && v.b[v.i] <= '9' {
		v.i++
	}
	return v.i > start
}
