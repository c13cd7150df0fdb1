package msgqueue

import (
	"encoding/json"
	"testing"
)

// FuzzDecode feeds hostile bodies to the request and answer decoders: they
// return an error or a value, never panic.
func FuzzDecode(f *testing.F) {
	for _, s := range []string{
		`{"Enqueue":{"queue":"q","data":[1,255],"capacity":null}}`,
		`{"Lease":{"queue":"q","capacity":3,"poll_timeout_ms":250,"ack_wait_ms":1}}`,
		`{"Settle":{"queue":"q","id":9,"requeue":true}}`,
		`"Ack"`, `{"Item":[7,0]}`, `{"Leased":{"id":3,"data":[7]}}`,
		`{"Item":[256]}`, `{"Item":"AQI="}`, `[`, ``,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		var req request
		_ = json.Unmarshal(b, &req)
		var resp response
		if json.Unmarshal(b, &resp) == nil && resp.Kind == "" {
			t.Fatalf("%q decoded to an answer with no kind", b)
		}
	})
}
