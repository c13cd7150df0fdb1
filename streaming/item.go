package streaming

import (
	"fmt"
	"reflect"

	"github.com/velo-go/velo/internal/msgpackcodec"
	wire "github.com/velo-go/velo/internal/streamwire"
)

// MsgpackAppender is an item type that encodes itself: AppendMsgpack
// appends exactly one MessagePack value to dst. The Sender writes the value
// straight into the frame, with no buffer of its own. AnchorHandle is
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
// costs no interface conversion and no escape per record. In order: a
// []byte is raw bytes (a MessagePack binary) whatever the codec; a Codec
// given by option; a type that encodes itself (MsgpackAppender,
// MsgpackUnmarshaler); the default MessagePack codec.

func encodeBytes(p []byte) ([]byte, error) { return bytesItemFrame(p), nil }

func decodeBytes(value []byte) ([]byte, error) { return bytesPayload(value) }

// encoderFor returns the function that writes the Item frame of a T.
func encoderFor[T any](c Codec) (func(T) ([]byte, error), error) {
	if f, ok := any(encodeBytes).(func(T) ([]byte, error)); ok {
		return f, nil
	}
	if c != nil {
		return encodeWith[T](c), nil
	}
	var z T
	if _, ok := any(z).(MsgpackAppender); ok {
		return func(v T) ([]byte, error) { return appendItem(any(v).(MsgpackAppender)), nil }, nil
	}
	if _, ok := any(&z).(MsgpackAppender); ok {
		return func(v T) ([]byte, error) { return appendItem(any(&v).(MsgpackAppender)), nil }, nil
	}
	if err := msgpackcodec.Check(reflect.TypeFor[T]()); err != nil {
		return nil, fmt.Errorf("%w: %v", ErrUnsupportedItem, err)
	}
	return encodeMsgpack[T], nil
}

// decoderFor returns the function that reads a T from an Item's value.
func decoderFor[T any](c Codec) (func([]byte) (T, error), error) {
	if f, ok := any(decodeBytes).(func([]byte) (T, error)); ok {
		return f, nil
	}
	if c != nil {
		return decodeWith[T](c), nil
	}
	var z T
	if _, ok := any(&z).(MsgpackUnmarshaler); ok {
		return func(b []byte) (T, error) {
			var v T
			if err := any(&v).(MsgpackUnmarshaler).UnmarshalMsgpack(b); err != nil {
				return v, &ItemError{Err: err}
			}
			return v, nil
		}, nil
	}
	if err := msgpackcodec.Check(reflect.TypeFor[T]()); err != nil {
		return nil, fmt.Errorf("%w: %v", ErrUnsupportedItem, err)
	}
	return decodeMsgpack[T], nil
}

func appendItem(v MsgpackAppender) []byte {
	return v.AppendMsgpack(append(make([]byte, 0, 64), itemPrefix...))
}

// bytesItemFrame copies payload into a frame of (nearly) the exact size:
// the one copy that a byte item costs on the same worker.
func bytesItemFrame(payload []byte) []byte {
	return wire.BytesItem(payload)
}

// bytesPayload returns the payload of a byte item's value, aliasing it.
func bytesPayload(value []byte) ([]byte, error) {
	p, ok := (wire.Frame{Kind: wire.KindItem, Item: value}).ItemBytes()
	if !ok {
		return nil, &ItemError{Err: fmt.Errorf("%w: the item is not a MessagePack binary", wire.ErrMalformed)}
	}
	return p, nil
}
