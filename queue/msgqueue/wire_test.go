package msgqueue

import (
	"encoding/json"
	"testing"
)

// TestWireGolden pins the request and answer bodies to serde_json's
// rendering of the reference's QueueRpcRequest and QueueRpcResponse
// (externally tagged enums, Vec<u8> as an array of numbers), plus our own
// Lease, Settle, Full, Leased and Gone.
func TestWireGolden(t *testing.T) {
	four := 4
	cases := []struct {
		v    any
		want string
	}{
		{request{Enqueue: &enqueueReq{Queue: "q", Data: []byte{1, 255}, Capacity: nil}},
			`{"Enqueue":{"queue":"q","data":[1,255],"capacity":null}}`},
		{request{Enqueue: &enqueueReq{Queue: "q", Data: []byte{}, Capacity: &four}},
			`{"Enqueue":{"queue":"q","data":[],"capacity":4}}`},
		{request{RecvPoll: &pollReq{Queue: "q", PollTimeoutMS: 250}},
			`{"RecvPoll":{"queue":"q","capacity":null,"poll_timeout_ms":250}}`},
		{request{Lease: &leaseReq{Queue: "q", PollTimeoutMS: 250, AckWaitMS: 30000}},
			`{"Lease":{"queue":"q","capacity":null,"poll_timeout_ms":250,"ack_wait_ms":30000}}`},
		{request{Settle: &settleReq{Queue: "q", ID: 9, Requeue: true}},
			`{"Settle":{"queue":"q","id":9,"requeue":true}}`},
		{response{Kind: kindAck}, `"Ack"`},
		{response{Kind: kindEmpty}, `"Empty"`},
		{response{Kind: kindFull}, `"Full"`},
		{response{Kind: kindItem, Data: []byte{7, 0}}, `{"Item":[7,0]}`},
		{response{Kind: kindLeased, ID: 3, Data: []byte{7}}, `{"Leased":{"id":3,"data":[7]}}`},
	}
	for _, c := range cases {
		got, err := json.Marshal(c.v)
		if err != nil {
			t.Fatal(err)
		}
		if string(got) != c.want {
			t.Errorf("got  %s\nwant %s", got, c.want)
		}
		if r, ok := c.v.(response); ok {
			var back response
			if err := json.Unmarshal(got, &back); err != nil || back.Kind != r.Kind || back.ID != r.ID || string(back.Data) != string(r.Data) {
				t.Errorf("round trip of %s: %+v %v", got, back, err)
			}
		}
	}
}

func TestWireRejects(t *testing.T) {
	var r response
	for _, bad := range []string{`{}`, `{"Item":"AQI="}`, `[`, `{"Other":1}`} {
		if err := json.Unmarshal([]byte(bad), &r); err == nil {
			t.Errorf("%s decoded", bad)
		}
	}
}
