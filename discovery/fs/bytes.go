package fs

import (
	"encoding/json"
	"fmt"
)

// byteArray is bytes written as a JSON array of numbers, as serde_bytes
// writes them in JSON, not as base64.
type byteArray []byte

func (b byteArray) MarshalJSON() ([]byte, error) {
	nums := make([]uint16, len(b))
	for i, c := range b {
		nums[i] = uint16(c)
	}
	return json.Marshal(nums)
}

func (b *byteArray) UnmarshalJSON(data []byte) error {
	var nums []uint16
	if err := json.Unmarshal(data, &nums); err != nil {
		return err
	}
	out := make([]byte, len(nums))
	for i, n := range nums {
		if n > 255 {
			return fmt.Errorf("fs discovery: byte value %d out of range", n)
		}
		out[i] = byte(n)
	}
	*b = out
	return nil
}
