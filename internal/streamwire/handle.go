package streamwire

import (
	"fmt"

	"github.com/velo-go/velo/ext"
	"github.com/velo-go/velo/internal/mpread"
	"github.com/velo-go/velo/internal/mpwrite"
)

// AnchorHandle is the reference's StreamAnchorHandle
// (lib/velo/src/streaming/handle.rs): a u128 whose upper 64 bits are the
// owner's WorkerID and whose lower 64 bits are the anchor's local id. The
// top bit of the local id (MPSCBit) marks an MPSC anchor; an SPSC local id
// has 63 bits. Local id 0 is reserved.
//
// It is not serialized as a u128 (rmp_serde would write a bin 16) but as
// the struct {hi: u64, lo: u64}: in JSON (the control bodies) the object
// {"hi":…,"lo":…}; in MessagePack by rmp_serde::to_vec the array [hi, lo].
type AnchorHandle struct {
	Hi uint64 // the owner's WorkerID
	Lo uint64 // the local id, with MPSCBit for an MPSC anchor
}

// MPSCBit is the bit of the local id that marks an MPSC anchor
// (handle.rs, MPSC_STREAM_BIT).
const MPSCBit = 1 << 63

// NewAnchorHandle packs an SPSC handle. localID must fit 63 bits.
func NewAnchorHandle(owner ext.WorkerID, localID uint64) AnchorHandle {
	return AnchorHandle{Hi: uint64(owner), Lo: localID}
}

// NewMPSCAnchorHandle packs an MPSC handle: localID (63 bits) with MPSCBit
// set.
func NewMPSCAnchorHandle(owner ext.WorkerID, localID uint64) AnchorHandle {
	return AnchorHandle{Hi: uint64(owner), Lo: localID | MPSCBit}
}

// Owner is the WorkerID of the node that holds the anchor.
func (h AnchorHandle) Owner() ext.WorkerID { return ext.WorkerID(h.Hi) }

// LocalID is the anchor's key in its owner's registry, MPSCBit included.
// It is also the anchor id of the per-stream TCP preamble.
func (h AnchorHandle) LocalID() uint64 { return h.Lo }

// IsMPSC reports whether the handle names an MPSC anchor.
func (h AnchorHandle) IsMPSC() bool { return h.Lo&MPSCBit != 0 }

// String is the reference's Display:
// StreamAnchorHandle(worker=<decimal>, local=<decimal without the kind bit>, kind=spsc|mpsc).
// It is for logs; nothing parses it.
func (h AnchorHandle) String() string {
	kind := "spsc"
	if h.IsMPSC() {
		kind = "mpsc"
	}
	return fmt.Sprintf("StreamAnchorHandle(worker=%d, local=%d, kind=%s)", h.Hi, h.Lo&^MPSCBit, kind)
}

// AppendMsgpack appends the handle as rmp_serde::to_vec writes it: the
// array [hi, lo], each in its smallest integer form. An application that
// puts a handle into its own MessagePack messages uses this form.
func (h AnchorHandle) AppendMsgpack(dst []byte) []byte { return appendHiLo(dst, h.Hi, h.Lo) }

// DecodeAnchorHandleMsgpack reads a handle that fills b: the array
// [hi, lo], or the map {"hi": …, "lo": …} (rmp_serde::to_vec_named), as
// rmp_serde reads a struct.
func DecodeAnchorHandleMsgpack(b []byte) (AnchorHandle, error) {
	hi, lo, err := decodeHiLo(b)
	return AnchorHandle{hi, lo}, err
}

// AppendJSON appends the handle as serde_json writes it: {"hi":N,"lo":N}.
func (h AnchorHandle) AppendJSON(dst []byte) []byte { return appendHiLoJSON(dst, h.Hi, h.Lo) }

// MarshalJSON implements json.Marshaler with AppendJSON.
func (h AnchorHandle) MarshalJSON() ([]byte, error) { return h.AppendJSON(nil), nil }

// UnmarshalJSON reads {"hi":N,"lo":N}; both fields are required.
func (h *AnchorHandle) UnmarshalJSON(b []byte) error {
	hi, lo, err := parseHiLoJSON(b)
	if err == nil {
		*h = AnchorHandle{hi, lo}
	}
	return err
}

// unmarshalMember is UnmarshalJSON for a handle inside a body that
// jsonObject checked.
func (h *AnchorHandle) unmarshalMember(b []byte) error {
	hi, lo, err := parseHiLoMember(b)
	if err == nil {
		*h = AnchorHandle{hi, lo}
	}
	return err
}

// CancelHandle is the reference's StreamCancelHandle
// (lib/velo/src/streaming/control.rs): the producer's WorkerID in the upper
// 64 bits and its local stream id in the lower 64, serialized as
// AnchorHandle is. The consumer sends _stream_cancel to it.
type CancelHandle struct {
	Hi uint64 // the producer's WorkerID
	Lo uint64 // the producer's stream id (sender_stream_id)
}

// NewCancelHandle packs a cancel handle.
func NewCancelHandle(producer ext.WorkerID, streamID uint64) CancelHandle {
	return CancelHandle{Hi: uint64(producer), Lo: streamID}
}

// Producer is the WorkerID of the producer's node.
func (h CancelHandle) Producer() ext.WorkerID { return ext.WorkerID(h.Hi) }

// StreamID is the producer's local stream id.
func (h CancelHandle) StreamID() uint64 { return h.Lo }

// AppendMsgpack appends the handle as the array [hi, lo].
func (h CancelHandle) AppendMsgpack(dst []byte) []byte { return appendHiLo(dst, h.Hi, h.Lo) }

// DecodeCancelHandleMsgpack reads a cancel handle as
// DecodeAnchorHandleMsgpack reads an anchor handle.
func DecodeCancelHandleMsgpack(b []byte) (CancelHandle, error) {
	hi, lo, err := decodeHiLo(b)
	return CancelHandle{hi, lo}, err
}

// AppendJSON appends {"hi":N,"lo":N}.
func (h CancelHandle) AppendJSON(dst []byte) []byte { return appendHiLoJSON(dst, h.Hi, h.Lo) }

// MarshalJSON implements json.Marshaler with AppendJSON.
func (h CancelHandle) MarshalJSON() ([]byte, error) { return h.AppendJSON(nil), nil }

// UnmarshalJSON reads {"hi":N,"lo":N}; both fields are required.
func (h *CancelHandle) UnmarshalJSON(b []byte) error {
	hi, lo, err := parseHiLoJSON(b)
	if err == nil {
		*h = CancelHandle{hi, lo}
	}
	return err
}

// unmarshalMember is UnmarshalJSON for a handle inside a checked body.
func (h *CancelHandle) unmarshalMember(b []byte) error {
	hi, lo, err := parseHiLoMember(b)
	if err == nil {
		*h = CancelHandle{hi, lo}
	}
	return err
}

func appendHiLo(dst []byte, hi, lo uint64) []byte {
	dst = append(dst, 0x92)
	return mpwrite.AppendUint(mpwrite.AppendUint(dst, hi), lo)
}

func decodeHiLo(b []byte) (hi, lo uint64, err error) {
	r := mpread.New(b, ErrMalformed)
	t, err := r.Byte()
	if err != nil {
		return 0, 0, err
	}
	switch t {
	case 0x92:
		if hi, err = r.Uint(); err != nil {
			return 0, 0, err
		}
		if lo, err = r.Uint(); err != nil {
			return 0, 0, err
		}
	case 0x82:
		var seen [2]bool
		for range 2 {
			name, err := r.StrUTF8()
			if err != nil {
				return 0, 0, err
			}
			v, err := r.Uint()
			if err != nil {
				return 0, 0, err
			}
			switch string(name) {
			case "hi":
				hi = v
				seen[0] = !seen[0]
			case "lo":
				lo = v
				seen[1] = !seen[1]
			default:
				return 0, 0, malformed("handle: field %q", name)
			}
		}
		if !seen[0] || !seen[1] {
			return 0, 0, malformed("handle: a field twice")
		}
	default:
		return 0, 0, malformed("handle: expected [hi, lo] or {hi, lo}, got 0x%02x", t)
	}
	if r.Len() != 0 {
		return 0, 0, malformed("handle: %d bytes after it", r.Len())
	}
	return hi, lo, nil
}
