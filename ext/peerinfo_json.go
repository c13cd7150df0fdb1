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
			// v is valid JSON (the map's decode checked the whole
			// document), so it goes to the parser without a rescan.
			err = w.WorkerAddress.UnmarshalJSON(v)
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

// UnmarshalJSON reads the array in one pass. A hello carries this array
// (a few hundred numbers) and is decoded on a connection's reader at
// first contact: handing each number to encoding/json as a value of its
// own scanned the array four times, made a call and an allocation per
// number, and grew the reader's fresh stack through the nested decoders.
// It takes what strconv.ParseUint(s, 10, 8) took of a JSON number: digits
// only, at most 255, and no leading zero (which JSON forbids anyway).
func (j *jsonBytes) UnmarshalJSON(b []byte) error {
	i := skipJSONSpace(b, 0)
	if i == len(b) || b[i] != '[' {
		return fmt.Errorf("ext: byte array: want an array, got %.20q", b[i:])
	}
	out := make([]byte, 0, len(b)/3)
	i = skipJSONSpace(b, i+1)
	if i < len(b) && b[i] == ']' {
		return j.end(b, i, out)
	}
	for {
		start, v := i, 0
		for i < len(b) && b[i] >= '0' && b[i] <= '9' {
			v = v*10 + int(b[i]-'0')
			i++
			if v > 255 || (i-start > 1 && b[start] == '0') {
				break
			}
		}
		if i == start || v > 255 || (i-start > 1 && b[start] == '0') || (i < len(b) && !isJSONSep(b[i])) {
			end := i
			for end < len(b) && !isJSONSep(b[end]) {
				end++
			}
			return fmt.Errorf("ext: byte value %q: not an integer 0-255", b[start:end])
		}
		out = append(out, byte(v))
		i = skipJSONSpace(b, i)
		switch {
		case i < len(b) && b[i] == ',':
			i = skipJSONSpace(b, i+1)
		case i < len(b) && b[i] == ']':
			return j.end(b, i, out)
		default:
			return fmt.Errorf("ext: byte array: unterminated")
		}
	}
}

// end finishes an array whose ']' is at b[i]: nothing but space may follow.
func (j *jsonBytes) end(b []byte, i int, out []byte) error {
	if skipJSONSpace(b, i+1) != len(b) {
		return fmt.Errorf("ext: byte array: trailing data")
	}
	*j = out
	return nil
}

func skipJSONSpace(b []byte, i int) int {
	for i < len(b) && (b[i] == ' ' || b[i] == '\t' || b[i] == '\n' || b[i] == '\r') {
		i++
	}
	return i
}

// isJSONSep reports whether c may follow a number inside an array.
func isJSONSep(c byte) bool {
	return c == ',' || c == ']' || c == ' ' || c == '\t' || c == '\n' || c == '\r'
}
