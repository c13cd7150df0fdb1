package streamwire

import (
	"bytes"
	"encoding/json"
	"errors"
	"strconv"
	"unicode/utf8"
)

// The control bodies are JSON, as serde_json writes them: the reference's
// typed handlers (lib/velo/src/messenger/handlers/mod.rs, typed_unary_async)
// read their input and write their output with serde_json, and the client
// writes the payload with serde_json::to_vec. serde_json writes fields in
// declaration order, no spaces, integers as plain numbers, and an enum as
// {"Variant":{…}}.
//
// The reader is written against serde_json's rules, not encoding/json's:
// keys match exactly (encoding/json folds case), a key given twice is
// refused (serde's derive refuses a duplicate field), null is not an empty
// string or list, and numbers are unsigned integers only. Unknown keys are
// skipped, as serde skips them.

// appendJSONString appends s as serde_json writes a string: ", \ and the
// control characters escaped (\b \f \n \r \t by name, the rest as \u00xx
// in lower-case hex), everything else as it is. Invalid UTF-8 becomes
// U+FFFD, as a Rust String cannot hold it.
func appendJSONString(dst []byte, s string) []byte {
	if plainJSONString(s) {
		// Transport keys and most reasons: one copy, not a byte at a time.
		dst = append(dst, '"')
		dst = append(dst, s...)
		return append(dst, '"')
	}
	const hexDigits = "0123456789abcdef"
	dst = append(dst, '"')
	for i := 0; i < len(s); {
		c := s[i]
		if c >= utf8.RuneSelf {
			r, n := utf8.DecodeRuneInString(s[i:])
			if r == utf8.RuneError && n == 1 {
				dst = append(dst, "\uFFFD"...)
			} else {
				dst = append(dst, s[i:i+n]...)
			}
			i += n
			continue
		}
		switch c {
		case '"':
			dst = append(dst, '\\', '"')
		case '\\':
			dst = append(dst, '\\', '\\')
		case '\b':
			dst = append(dst, '\\', 'b')
		case '\f':
			dst = append(dst, '\\', 'f')
		case '\n':
			dst = append(dst, '\\', 'n')
		case '\r':
			dst = append(dst, '\\', 'r')
		case '\t':
			dst = append(dst, '\\', 't')
		default:
			if c < 0x20 {
				dst = append(dst, '\\', 'u', '0', '0', hexDigits[c>>4], hexDigits[c&0xf])
			} else {
				dst = append(dst, c)
			}
		}
		i++
	}
	return append(dst, '"')
}

// plainJSONString says whether s is printable ASCII with no quote or
// backslash: a string that serde_json writes as it is.
func plainJSONString(s string) bool {
	for i := 0; i < len(s); i++ {
		if c := s[i]; c < 0x20 || c > 0x7e || c == '"' || c == '\\' {
			return false
		}
	}
	return true
}

func appendJSONField(dst []byte, first bool, name string) []byte {
	if !first {
		dst = append(dst, ',')
	}
	dst = append(dst, '"')
	dst = append(dst, name...)
	return append(dst, '"', ':')
}

func appendHiLoJSON(dst []byte, hi, lo uint64) []byte {
	dst = append(dst, `{"hi":`...)
	dst = strconv.AppendUint(dst, hi, 10)
	dst = append(dst, `,"lo":`...)
	dst = strconv.AppendUint(dst, lo, 10)
	return append(dst, '}')
}

// jsonObject calls visit for each member of the JSON object that fills b,
// in order. It refuses anything but one object, a key given twice, and
// input that is not UTF-8.
//
// It checks the syntax once (validJSON, encoding/json.Valid's rules) and then walks the members by
// hand: json.Decoder's token stream allocated for every token, and the
// attach bodies it reads are on the path of every stream's setup.
func jsonObject(b []byte, what string, visit func(key string, val json.RawMessage) error) error {
	if !utf8.Valid(b) {
		return malformed("%s: not UTF-8", what)
	}
	if !validJSON(b) {
		return malformed("%s: not valid JSON", what)
	}
	return jsonMembers(b, what, visit)
}

// jsonMembers is jsonObject for a value inside a body that jsonObject
// already checked: it walks without checking the syntax again (a nested
// handle or enum body used to pay for json.Valid a second time). Call it
// only on such a value.
func jsonMembers(b []byte, what string, visit func(key string, val json.RawMessage) error) error {
	i := skipJSONSpace(b, 0)
	if b[i] != '{' {
		return malformed("%s: not a JSON object", what)
	}
	i = skipJSONSpace(b, i+1)
	var seenBuf [8]string // bodies have a handful of keys
	seen := seenBuf[:0]
	for b[i] != '}' {
		end := scanJSONString(b, i)
		key, err := jsonKey(b[i:end])
		if err != nil {
			return malformed("%s: bad key", what)
		}
		for _, k := range seen {
			if k == key {
				return malformed("%s: duplicate field %q", what, key)
			}
		}
		seen = append(seen, key)
		i = skipJSONSpace(b, skipJSONSpace(b, end)+1) // past the colon
		vend := scanJSONValue(b, i)
		if err := visit(key, json.RawMessage(b[i:vend:vend])); err != nil {
			return err
		}
		i = skipJSONSpace(b, vend)
		if b[i] == ',' {
			i = skipJSONSpace(b, i+1)
		}
	}
	return nil // json.Valid saw one value: nothing follows the object
}

func skipJSONSpace(b []byte, i int) int {
	for i < len(b) && (b[i] == ' ' || b[i] == '\t' || b[i] == '\n' || b[i] == '\r') {
		i++
	}
	return i
}

// scanJSONString returns the index just past the string that starts at
// b[i] (a quote). b is valid JSON.
func scanJSONString(b []byte, i int) int {
	for i++; i < len(b); i++ {
		switch b[i] {
		case '\\':
			i++
		case '"':
			return i + 1
		}
	}
	return len(b)
}

// scanJSONValue returns the index just past the value that starts at b[i].
// b is valid JSON.
func scanJSONValue(b []byte, i int) int {
	switch b[i] {
	case '"':
		return scanJSONString(b, i)
	case '{', '[':
		depth := 0
		for ; i < len(b); i++ {
			switch b[i] {
			case '"':
				i = scanJSONString(b, i) - 1
			case '{', '[':
				depth++
			case '}', ']':
				if depth--; depth == 0 {
					return i + 1
				}
			}
		}
		return len(b)
	}
	for i < len(b) && !endsScalar(b[i]) {
		i++
	}
	return i
}

// endsScalar says whether c ends a number or literal: one load from a
// table, not a search of a set, since handles and session ids are
// numbers of up to 20 digits and every attach scans several of them.
func endsScalar(c byte) bool { return scalarEnd[c] }

var scalarEnd = [256]bool{',': true, '}': true, ']': true, ' ': true, '\t': true, '\n': true, '\r': true}

// jsonKey reads a quoted key; only a key with escapes pays for a decode.
func jsonKey(q []byte) (string, error) {
	if len(q) < 2 || q[0] != '"' {
		return "", errors.New("not a string")
	}
	if bytes.IndexByte(q, '\\') < 0 {
		return knownString(q[1 : len(q)-1]), nil
	}
	var k string
	err := json.Unmarshal(q, &k)
	return k, err
}

// jsonUint reads an unsigned integer of at most bits bits: digits only, as
// serde_json reads a u64 or u32 (no sign, fraction, exponent or quotes).
func jsonUint(val json.RawMessage, bits int, field string) (uint64, error) {
	if len(val) == 0 {
		return 0, malformed("%s: empty", field)
	}
	for _, c := range val {
		if c < '0' || c > '9' {
			return 0, malformed("%s: %.40q is not an unsigned integer", field, val)
		}
	}
	v, err := strconv.ParseUint(string(val), 10, bits)
	if err != nil {
		return 0, malformed("%s: %.40q does not fit %d bits", field, val, bits)
	}
	return v, nil
}

// jsonString reads a string value. Values are inside a body that
// jsonObject checked with json.Valid, so a string without escapes is its
// bytes between the quotes; only one with escapes pays for a decode.
func jsonString(val json.RawMessage, field string) (string, error) {
	if len(val) < 2 || val[0] != '"' || val[len(val)-1] != '"' {
		return "", malformed("%s: not a string", field)
	}
	if bytes.IndexByte(val, '\\') < 0 {
		return knownString(val[1 : len(val)-1]), nil
	}
	var s string
	if json.Unmarshal(val, &s) != nil {
		return "", malformed("%s: not a string", field)
	}
	return s, nil
}

// knownString is string(b), without an allocation for the strings that
// bodies carry again and again: field names and transport keys.
func knownString(b []byte) string {
	switch string(b) { // the compiler compares without converting
	case "handle":
		return "handle"
	case "session_id":
		return "session_id"
	case "stream_cancel_handle":
		return "stream_cancel_handle"
	case "supported_transport_keys":
		return "supported_transport_keys"
	case "lane_key":
		return "lane_key"
	case "hi":
		return "hi"
	case "lo":
		return "lo"
	case "Ok":
		return "Ok"
	case "Err":
		return "Err"
	case "reason":
		return "reason"
	case "streaming_transport_key":
		return "streaming_transport_key"
	case "heartbeat_interval_ms":
		return "heartbeat_interval_ms"
	case "routing_session_id":
		return "routing_session_id"
	case "initial_credit":
		return "initial_credit"
	case "slot_byte_budget":
		return "slot_byte_budget"
	case "sender_id":
		return "sender_id"
	case "lane":
		return "lane"
	case "messenger-mux-v2":
		return "messenger-mux-v2"
	case "messenger-mux-v1":
		return "messenger-mux-v1"
	case "tcp-stream":
		return "tcp-stream"
	case "grpc-stream":
		return "grpc-stream"
	}
	return string(b)
}

// jsonStrings reads a list of strings, walking it as jsonObject walks an
// object (the body is valid JSON).
func jsonStrings(val json.RawMessage, field string) ([]string, error) {
	if len(val) == 0 || val[0] != '[' {
		return nil, malformed("%s: not a list", field)
	}
	out := make([]string, 0, 4)
	i := skipJSONSpace(val, 1)
	for i < len(val) && val[i] != ']' {
		end := scanJSONValue(val, i)
		s, err := jsonString(val[i:end], field)
		if err != nil {
			return nil, err
		}
		out = append(out, s)
		i = skipJSONSpace(val, end)
		if i < len(val) && val[i] == ',' {
			i = skipJSONSpace(val, i+1)
		}
	}
	return out, nil
}

func parseHiLoJSON(b []byte) (hi, lo uint64, err error) {
	return hiLo(b, false)
}

// parseHiLoMember is parseHiLoJSON for a handle inside a checked body.
func parseHiLoMember(b []byte) (hi, lo uint64, err error) {
	return hiLo(b, true)
}

// hiLo reads {"hi":N,"lo":N}; checked says b was validated as part of its
// body already. The walkers are called directly, not through a function
// value, so that the visitor and what it captures stay on the stack: two
// handles are read per attach.
func hiLo(b []byte, checked bool) (hi, lo uint64, err error) {
	var haveHi, haveLo bool
	visit := func(key string, val json.RawMessage) error {
		var err error
		switch key {
		case "hi":
			hi, err = jsonUint(val, 64, "handle.hi")
			haveHi = true
		case "lo":
			lo, err = jsonUint(val, 64, "handle.lo")
			haveLo = true
		}
		return err
	}
	if checked {
		err = jsonMembers(b, "handle", visit)
	} else {
		err = jsonObject(b, "handle", visit)
	}
	if err == nil && (!haveHi || !haveLo) {
		err = malformed("handle: missing hi or lo")
	}
	return hi, lo, err
}
