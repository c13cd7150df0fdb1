package ext

import (
	"encoding/json"
	"fmt"
	"strconv"
)

// MarshalJSON writes the peer as the reference's PeerInfo serializes with
// serde_json (lib/velo-ext/src/id/address.rs):
//
//	{"instance_id":"<uuid>","worker_address":[<encoded address bytes>]}
//
// The address is its MessagePack encoding, as a JSON array of numbers
// (serde_bytes writes bytes that way in JSON), not base64.
func (p PeerInfo) MarshalJSON() ([]byte, error) {
	enc := p.Address.Encode()
	b := make([]byte, 0, 64+4*len(enc))
	b = append(b, `{"instance_id":"`...)
	b = append(b, p.InstanceID.String()...)
	b = append(b, `","worker_address":`...)
	b = appendJSONBytes(b, enc)
	return append(b, '}'), nil
}

// UnmarshalJSON reads what MarshalJSON writes. Field names must match
// exactly, as serde's do.
func (p *PeerInfo) UnmarshalJSON(b []byte) error {
	var raw map[string]json.RawMessage
	if err := json.Unmarshal(b, &raw); err != nil {
		return fmt.Errorf("ext: peer info: %w", err)
	}
	var w struct {
		InstanceID    *InstanceID
		WorkerAddress jsonBytes
	}
	for k, v := range raw {
		if string(v) == "null" && (k == "instance_id" || k == "worker_address") {
			return fmt.Errorf("ext: peer info: %s is null", k)
		}
		var err error
		switch k {
		case "instance_id":
			w.InstanceID = new(InstanceID)
			err = json.Unmarshal(v, w.InstanceID)
		case "worker_address":
			err = json.Unmarshal(v, &w.WorkerAddress)
		}
		if err != nil {
			return fmt.Errorf("ext: peer info: %s: %w", k, err)
		}
	}
	if w.InstanceID == nil || w.WorkerAddress == nil {
		return fmt.Errorf("ext: peer info needs instance_id and worker_address")
	}
	addr, err := DecodeWorkerAddress(w.WorkerAddress)
	if err != nil {
		return err
	}
	*p = PeerInfo{InstanceID: *w.InstanceID, Address: addr}
	return nil
}

func appendJSONBytes(b, v []byte) []byte {
	b = append(b, '[')
	for i, c := range v {
		if i > 0 {
			b = append(b, ',')
		}
		b = strconv.AppendUint(b, uint64(c), 10)
	}
	return append(b, ']')
}

// jsonBytes reads a JSON array of numbers 0-255 as bytes.
type jsonBytes []byte

func (j *jsonBytes) UnmarshalJSON(b []byte) error {
	var nums []uint8Num
	if err := json.Unmarshal(b, &nums); err != nil {
		return err
	}
	out := make([]byte, len(nums))
	for i, n := range nums {
		out[i] = byte(n)
	}
	*j = out
	return nil
}

// uint8Num is a JSON number that must fit in a byte. Its kind is not
// uint8 on purpose: encoding/json reads a slice of a byte kind as base64.
type uint8Num uint16

func (u *uint8Num) UnmarshalJSON(b []byte) error {
	v, err := strconv.ParseUint(string(b), 10, 8)
	if err != nil {
		return fmt.Errorf("ext: byte value %s: %w", b, err)
	}
	*u = uint8Num(v)
	return nil
}
