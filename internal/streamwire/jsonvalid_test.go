package streamwire

import (
	"encoding/json"
	"strings"
	"testing"
)

// validJSON must agree with encoding/json.Valid on every input.
func FuzzValidJSON(f *testing.F) {
	for _, s := range []string{
		`{"handle":{"hi":1,"lo":2},"session_id":3,"stream_cancel_handle":{"hi":4,"lo":5},"supported_transport_keys":["messenger-mux-v2","tcp-stream"]}`,
		`{"Ok":{"streaming_transport_key":"tcp-stream","heartbeat_interval_ms":1234}}`,
		`{"Err":{"reason":"a\"b\\c\n\t\r\b\f\u0001\u001fé"}}`,
		` [1, -0.5e+3, true, false, null, "\u00e9", {}, []] `,
		`01`, `-`, `1.`, `1e`, `"\x"`, `"\u12"`, `{"a":1,}`, `[1,]`, `{"a" 1}`, `{1:2}`, "\"a\x01\"", `nul`, ``, ` `,
		strings.Repeat("[", 10001) + strings.Repeat("]", 10001),
		strings.Repeat("[", 10000) + strings.Repeat("]", 10000),
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		if got, want := validJSON(b), json.Valid(b); got != want {
			t.Fatalf("validJSON(%q) = %v, encoding/json.Valid = %v", b, got, want)
		}
	})
}
