// Package events has generational events: one-shot signals with compact
// 128-bit handles that can travel to other nodes.
//
// An Event is completed exactly once, by Trigger or Poison. Waiters wait on
// its Handle with a context. Explicit completion is the rule; an Event that
// becomes unreachable without being completed is poisoned by a cleanup the
// runtime runs, so no waiter waits for an event nobody can complete, but
// when that happens is up to the garbage collector.
//
// In a node the manager is distributed: a handle names its owner, and a wait
// on another node's handle subscribes to the owner with active messages,
// after looking in a cache of completed events and in the subscriptions
// already open.
package events

import (
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"

	"github.com/velo-go/velo/ext"
	"github.com/velo-go/velo/internal/mpread"
)

// Handle names one event. As a u128 it is laid out as the reference lays
// out an EventHandle (lib/velo/src/events/handle.rs): the owner's WorkerID
// in bits 64-127, the slot index in bits 32-63 and its generation in bits
// 0-31. Bit 63 (the top bit of the index) marks a local-only event in the
// reference; this node's indexes stay below it. A handle whose slot was
// reused is stale and never completes the new event.
type Handle struct {
	Hi uint64 // owner WorkerID
	Lo uint64 // slot index << 32 | generation
}

// Owner is the WorkerID of the node that owns the event.
func (h Handle) Owner() ext.WorkerID { return ext.WorkerID(h.Hi) }

func (h Handle) index() uint32 { return uint32(h.Lo >> 32) }
func (h Handle) gen() uint32   { return uint32(h.Lo) }

func makeHandle(owner ext.WorkerID, idx, gen uint32) Handle {
	return Handle{Hi: uint64(owner), Lo: uint64(idx)<<32 | uint64(gen)}
}

// IsZero reports the zero handle, which names no event.
func (h Handle) IsZero() bool { return h == Handle{} }

func (h Handle) String() string { return fmt.Sprintf("event(%016x:%016x)", h.Hi, h.Lo) }

// ErrMalformedHandle wraps handle decoding failures.
var ErrMalformedHandle = errors.New("velo: malformed event handle")

// MarshalMsgpack encodes the handle as the MessagePack map {"hi": u64, "lo": u64}.
func (h Handle) MarshalMsgpack() []byte {
	b := make([]byte, 0, 1+3+9+3+9)
	b = append(b, 0x82, 0xa2, 'h', 'i', 0xcf)
	b = binary.BigEndian.AppendUint64(b, h.Hi)
	b = append(b, 0xa2, 'l', 'o', 0xcf)
	return binary.BigEndian.AppendUint64(b, h.Lo)
}

// UnmarshalMsgpack reads a {"hi","lo"} map; integers may use any
// MessagePack unsigned width. It never panics. It reads only the forms a
// handle is written in (a fixmap, fixstr keys, unsigned integers), so one
// handle has few encodings.
func (h *Handle) UnmarshalMsgpack(b []byte) error {
	r := mpread.New(b, ErrMalformedHandle)
	if c, _ := r.Peek(); c != 0x82 {
		return fmt.Errorf("%w: not a two-entry map", ErrMalformedHandle)
	}
	if n, err := r.MapLen(); err != nil || n != 2 {
		return fmt.Errorf("%w: not a two-entry map", ErrMalformedHandle)
	}
	var got [2]bool
	for range 2 {
		if c, _ := r.Peek(); c&0xe0 != 0xa0 {
			return fmt.Errorf("%w: bad key", ErrMalformedHandle)
		}
		key, err := r.Str()
		if err != nil {
			return err
		}
		if c, _ := r.Peek(); c >= 0xd0 && c <= 0xd3 {
			return fmt.Errorf("%w: signed integer 0x%02x", ErrMalformedHandle, c)
		}
		v, err := r.Uint()
		if err != nil {
			return err
		}
		switch string(key) {
		case "hi":
			h.Hi, got[0] = v, true
		case "lo":
			h.Lo, got[1] = v, true
		default:
			return fmt.Errorf("%w: key %q", ErrMalformedHandle, key)
		}
	}
	if !got[0] || !got[1] || r.Len() != 0 {
		return fmt.Errorf("%w: want hi and lo only", ErrMalformedHandle)
	}
	return nil
}

// MarshalText writes the handle as 32 hex digits, so it reads well in JSON.
func (h Handle) MarshalText() ([]byte, error) {
	return []byte(fmt.Sprintf("%016x%016x", h.Hi, h.Lo)), nil
}

// UnmarshalText reads what MarshalText writes.
func (h *Handle) UnmarshalText(b []byte) error {
	if len(b) != 32 {
		return fmt.Errorf("%w: %d characters", ErrMalformedHandle, len(b))
	}
	var raw [16]byte
	if _, err := hex.Decode(raw[:], b); err != nil {
		return fmt.Errorf("%w: %v", ErrMalformedHandle, err)
	}
	h.Hi, h.Lo = binary.BigEndian.Uint64(raw[:8]), binary.BigEndian.Uint64(raw[8:])
	return nil
}
