package streaming

import (
	"fmt"

	"github.com/velo-go/velo/streaming/wire"
)

// MsgpackAppender is an item type that encodes itself: AppendMsgpack
// appends exactly one MessagePack value to dst. The Sender writes the value
// straight into the frame, with no buffer of its own. wire.AnchorHandle is
// one.
type MsgpackAppender interface {
	AppendMsgpack(dst []byte) []byte
}

// MsgpackUnmarshaler is an item type that decodes itself from exactly one
// MessagePack value. b aliases the frame, which the consumer owns: an item
// may keep slices of it.
type MsgpackUnmarshaler interface {
	UnmarshalMsgpack(b []byte) error
}

// itemPrefix is the start of an Item frame, before the value:
// a map of one entry whose key is "Item".
const itemPrefix = "\x81\xa4Item"

// The codec of a stream's T is chosen once, when the anchor is created or
// the sender attached, as a function of T by value: a []byte item then
// costs no interface conversion and no escape per record.

func encodeBytes(p []byte) []byte { return bytesItemFrame(p) }

func decodeBytes(value []byte) ([]byte, error) { return bytesPayload(value) }

// encoderFor returns the function that writes the Item frame of a T.
func encoderFor[T any]() (func(T) []byte, error) {
	if f, ok := any(encodeBytes).(func(T) []byte); ok {
		return f, nil
	}
	var z T
	if _, ok := any(z).(MsgpackAppender); ok {
		return func(v T) []byte { return appendItem(any(v).(MsgpackAppender)) }, nil
	}
	if _, ok := any(&z).(MsgpackAppender); ok {
		return func(v T) []byte { return appendItem(any(&v).(MsgpackAppender)) }, nil
	}
	return nil, fmt.Errorf("%w: %T is neither []byte nor a MsgpackAppender", ErrUnsupportedItem, z)
}

// decoderFor returns the function that reads a T from an Item's value.
func decoderFor[T any]() (func([]byte) (T, error), error) {
	if f, ok := any(decodeBytes).(func([]byte) (T, error)); ok {
		return f, nil
	}
	var z T
	if _, ok := any(&z).(MsgpackUnmarshaler); ok {
		return func(b []byte) (T, error) {
			var v T
			if err := any(&v).(MsgpackUnmarshaler).UnmarshalMsgpack(b); err != nil {
				return v, &DecodeError{Err: err}
			}
			return v, nil
		}, nil
	}
	return nil, fmt.Errorf("%w: %T is not []byte and *%T is not a MsgpackUnmarshaler", ErrUnsupportedItem, z, z)
}

func appendItem(v MsgpackAppender) []byte {
	return v.AppendMsgpack(append(make([]byte, 0, 64), itemPrefix...))
}

// bytesItemFrame copies payload into a frame of (nearly) the exact size:
// the one copy that a byte item costs on the same worker.
func bytesItemFrame(payload []byte) []byte {
	return wire.AppendBytesItem(make([]byte, 0, len(itemPrefix)+5+len(payload)), payload)
}

// bytesPayload returns the payload of a byte item's value, aliasing it.
func bytesPayload(value []byte) ([]byte, error) {
	p, ok := (wire.Frame{Kind: wire.KindItem, Item: value}).ItemBytes()
	if !ok {
		return nil, &DecodeError{Err: fmt.Errorf("%w: the item is not a MessagePack binary", wire.ErrMalformed)}
	}
	return p, nil
}
