package streaming

import "github.com/velo-go/velo/streaming/wire"

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
// It is the same type as the wire package's, so either name works.
type AnchorHandle = wire.AnchorHandle
