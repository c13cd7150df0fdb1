package streaming

import (
	"github.com/velo-go/velo/internal/msgpackcodec"
	"github.com/velo-go/velo/streaming/internal/streamerr"
)

// Codec encodes and decodes the items of a stream whose T is not []byte,
// for users who want protobuf, JSON or a format of their own instead of the
// default MessagePack. Marshal gets a T; Unmarshal gets a *T. Both ends of
// a stream must use the same codec: the consumer's (WithCodec) and the
// producer's (WithSenderCodec).
//
// A Codec's bytes travel as a MessagePack binary, the same item a []byte
// stream carries, so a Rust peer sees a Bytes item it decodes itself. A
// Codec must be safe for use by several goroutines.
type Codec interface {
	Marshal(v any) ([]byte, error)
	Unmarshal(data []byte, v any) error
}

// WithCodec makes the anchor decode its items with c instead of the
// default MessagePack codec. It has no effect on a []byte anchor, whose
// items are raw bytes.
func WithCodec(c Codec) AnchorOption {
	return AnchorOption{func(cfg *anchorConfig) { cfg.codec = c }}
}

// SenderOption changes one setting of AttachAnchor, AttachMPSCAnchor,
// OpenAnchorStream and PrebindAnchor.
type SenderOption struct {
	apply func(*senderConfig)
}

type senderConfig struct {
	codec Codec
	key   *uint64 // WithLaneKey
}

// WithLaneKey gives the stream a placement key for the mux: its owner
// puts it on lane splitmix64(key) % lanes, so streams with one key to one
// owner share a lane, on every node with the same lane count. It is a
// placement hint, not an ordering guarantee; on the same worker and on the
// per-stream path it changes nothing. The codec options ignore it.
func WithLaneKey(key uint64) SenderOption {
	return SenderOption{func(cfg *senderConfig) { cfg.key = &key }}
}

// WithSenderCodec makes the Sender encode its items with c instead of the
// default MessagePack codec. It has no effect on a []byte Sender.
func WithSenderCodec(c Codec) SenderOption {
	return SenderOption{func(cfg *senderConfig) { cfg.codec = c }}
}

func senderCodec(opts []SenderOption) Codec { return senderOptions(opts).codec }

func senderOptions(opts []SenderOption) senderConfig {
	if len(opts) == 0 {
		// The usual call passes none; the loop below would move cfg to the
		// heap (its apply is an indirect call), an allocation per stream.
		return senderConfig{}
	}
	var cfg senderConfig
	for _, o := range opts {
		if o.apply != nil {
			o.apply(&cfg)
		}
	}
	return cfg
}

// ItemError is an item that its codec could not encode or decode. Send
// returns it for an item it could not encode: nothing was sent, and the
// stream goes on. Next returns it for a frame or an item that did not
// decode, and the stream ends (an MPSC anchor delivers it as MPSCBadItem
// and goes on).
type ItemError = streamerr.ItemError

// encodeMsgpack writes the Item frame of v in the default codec: the
// value's MessagePack, as rmp_serde writes the same serde type, so a Rust
// peer's Anchor<T> reads it.
func encodeMsgpack[T any](v T) ([]byte, error) {
	b, err := msgpackcodec.Append(append(make([]byte, 0, 64), itemPrefix...), v)
	if err != nil {
		return nil, &ItemError{Err: err}
	}
	return b, nil
}

func decodeMsgpack[T any](value []byte) (T, error) {
	var v T
	if err := msgpackcodec.Unmarshal(value, &v); err != nil {
		return v, &ItemError{Err: err}
	}
	return v, nil
}

func encodeWith[T any](c Codec) func(T) ([]byte, error) {
	return func(v T) ([]byte, error) {
		p, err := c.Marshal(v)
		if err != nil {
			return nil, &ItemError{Err: err}
		}
		return bytesItemFrame(p), nil
	}
}

func decodeWith[T any](c Codec) func([]byte) (T, error) {
	return func(value []byte) (T, error) {
		var v T
		p, err := bytesPayload(value)
		if err != nil {
			return v, err
		}
		if err := c.Unmarshal(p, &v); err != nil {
			return v, &ItemError{Err: err}
		}
		return v, nil
	}
}
