package msgwire

import (
	"encoding/binary"

	"github.com/velo-go/velo/ext"
)

// ResponseType says what a request's caller waits for.
type ResponseType uint8

// Response types, as on the wire.
const (
	FireAndForget ResponseType = 0
	AckNack       ResponseType = 1
	UnaryResponse ResponseType = 2
)

func (r ResponseType) String() string {
	switch r {
	case FireAndForget:
		return "fire_and_forget"
	case AckNack:
		return "sync"
	case UnaryResponse:
		return "unary"
	}
	return "unknown"
}

// ResponseID names the caller's response slot. It is a u128 on the wire
// (little-endian), laid out as the reference implementation lays it out
// (lib/velo/src/messenger/common/responses.rs): bits 0-63 are the caller's
// WorkerID, so a reply can be routed without any other state; bits 64-79
// are the slot index and bits 80-127 a 48-bit generation. Lo holds bits
// 0-63 and Hi bits 64-127. The messenger draws each generation at random,
// so Hi is the slot token; it is zero for fire-and-forget.
type ResponseID struct {
	Lo, Hi uint64
}

// Worker is the caller's WorkerID.
func (r ResponseID) Worker() ext.WorkerID { return ext.WorkerID(r.Lo) }

// Slot is the index of the caller's response slot.
func (r ResponseID) Slot() uint16 { return uint16(r.Hi) }

// Generation is the 48-bit generation of the caller's response slot.
func (r ResponseID) Generation() uint64 { return r.Hi >> 16 }

// AppendLE appends the id as 16 little-endian bytes.
func (r ResponseID) AppendLE(b []byte) []byte {
	b = binary.LittleEndian.AppendUint64(b, r.Lo)
	return binary.LittleEndian.AppendUint64(b, r.Hi)
}

// ReadResponseID reads what AppendLE wrote; b holds at least 16 bytes.
func ReadResponseID(b []byte) ResponseID {
	return ResponseID{Lo: binary.LittleEndian.Uint64(b), Hi: binary.LittleEndian.Uint64(b[8:])}
}
