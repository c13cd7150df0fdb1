package msgqueue

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strconv"
)

// Handler is the one messenger handler of the queue actor, as in the Rust
// reference: queue names travel in the request, not in the handler name.
const Handler = "velo.queue.rpc"

// request is the JSON body of a call to Handler: an externally tagged enum
// (exactly one field set). Enqueue and RecvPoll are the reference's; Lease
// and Settle are ours, for acknowledged delivery (see docs/wire.md).
type request struct {
	Enqueue  *enqueueReq `json:"Enqueue,omitempty"`
	RecvPoll *pollReq    `json:"RecvPoll,omitempty"`
	Lease    *leaseReq   `json:"Lease,omitempty"`
	Settle   *settleReq  `json:"Settle,omitempty"`
}

type enqueueReq struct {
	Queue    string    `json:"queue"`
	Data     byteArray `json:"data"`
	Capacity *int      `json:"capacity"`
}

type pollReq struct {
	Queue         string `json:"queue"`
	Capacity      *int   `json:"capacity"`
	PollTimeoutMS uint64 `json:"poll_timeout_ms"`
}

type leaseReq struct {
	Queue         string `json:"queue"`
	Capacity      *int   `json:"capacity"`
	PollTimeoutMS uint64 `json:"poll_timeout_ms"`
	AckWaitMS     uint64 `json:"ack_wait_ms"`
}

type settleReq struct {
	Queue   string `json:"queue"`
	ID      uint64 `json:"id"`
	Requeue bool   `json:"requeue"`
}

// Answer kinds. Ack, Item and Empty are the reference's; Full, Leased and
// Gone are ours.
const (
	kindAck    = "Ack"
	kindEmpty  = "Empty"
	kindFull   = "Full"
	kindGone   = "Gone"
	kindItem   = "Item"
	kindLeased = "Leased"
)

// response is the JSON answer: a unit variant is a bare string ("Ack"),
// Item is {"Item":[bytes]}, Leased is {"Leased":{"id":n,"data":[bytes]}}.
type response struct {
	Kind string
	ID   uint64
	Data []byte
}

type leased struct {
	ID   uint64    `json:"id"`
	Data byteArray `json:"data"`
}

func (r response) MarshalJSON() ([]byte, error) {
	switch r.Kind {
	case kindItem:
		return json.Marshal(map[string]byteArray{kindItem: r.Data})
	case kindLeased:
		return json.Marshal(map[string]leased{kindLeased: {r.ID, r.Data}})
	default:
		return json.Marshal(r.Kind)
	}
}

func (r *response) UnmarshalJSON(b []byte) error {
	if len(b) > 0 && b[0] == '"' {
		return r.unitKind(b)
	}
	var m struct {
		Item   *byteArray `json:"Item"`
		Leased *leased    `json:"Leased"`
	}
	if err := json.Unmarshal(b, &m); err != nil {
		return err
	}
	switch {
	case m.Item != nil:
		r.Kind, r.Data = kindItem, *m.Item
	case m.Leased != nil:
		r.Kind, r.ID, r.Data = kindLeased, m.Leased.ID, m.Leased.Data
	default:
		return fmt.Errorf("msgqueue: unknown answer %.40s", b)
	}
	return nil
}

// unitKind reads a bare-string answer; only the known unit variants pass.
func (r *response) unitKind(b []byte) error {
	var k string
	if err := json.Unmarshal(b, &k); err != nil {
		return err
	}
	switch k {
	case kindAck, kindEmpty, kindFull, kindGone:
		r.Kind = k
		return nil
	}
	return fmt.Errorf("msgqueue: unknown answer %.40q", k)
}

// byteArray is a Vec<u8> as serde_json writes it: an array of numbers,
// not the base64 string encoding/json uses for []byte.
type byteArray []byte

func (a byteArray) MarshalJSON() ([]byte, error) {
	out := make([]byte, 0, 2+4*len(a))
	out = append(out, '[')
	for i, v := range a {
		if i > 0 {
			out = append(out, ',')
		}
		out = strconv.AppendUint(out, uint64(v), 10)
	}
	return append(out, ']'), nil
}

func (a *byteArray) UnmarshalJSON(b []byte) error {
	if bytes.Equal(b, []byte("null")) {
		*a = nil
		return nil
	}
	var nums []uint8
	if len(b) == 0 || b[0] != '[' {
		return fmt.Errorf("msgqueue: bytes must be a JSON array")
	}
	if err := json.Unmarshal(b, &nums); err != nil {
		return err
	}
	*a = nums
	return nil
}
