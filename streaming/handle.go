package streaming

import wire "github.com/velo-go/velo/internal/streamwire"

// AnchorHandle names an anchor to producers: the owner's WorkerID in the
// upper 64 bits and a random local id in the lower 64. Send it to a
// producer inside a request of your own; it marshals to JSON as
// {"hi":…,"lo":…} and to MessagePack as the Rust reference's handle does,
// so a typed handler can take it as (part of) its argument:
//
//	velo.TypedUnaryHandler("generate", func(c *velo.Context, h streaming.AnchorHandle) (string, error) {
//		s, err := streaming.AttachAnchor[Token](c.Context(), node.Streams, h)
//		...
//	})
//
// Its methods: Owner (the WorkerID), LocalID, IsMPSC (a handle of an MPSC
// anchor), String, MarshalJSON and UnmarshalJSON, AppendJSON and
// AppendMsgpack. It is an alias of the type in the module's internal wire
// codec: this is the only name for it a user needs.
type AnchorHandle = wire.AnchorHandle

// ByteItemBuilder writes a byte item's frame in place, for
// Sender.SendFrame: Write or fmt.Fprintf the payload into it, then Finish
// gives the frame, which the stream takes without a copy. Write appends to
// the payload; Buffer gives the payload's slice to append to directly
// (strconv.AppendInt, json.Marshal's append forms); Finish ends it.
type ByteItemBuilder = wire.ByteItemBuilder

// NewByteItemBuilder returns a ByteItemBuilder with room for a payload of
// capacity bytes; it grows past that as needed.
func NewByteItemBuilder(capacity int) *ByteItemBuilder { return wire.NewByteItemBuilder(capacity) }
