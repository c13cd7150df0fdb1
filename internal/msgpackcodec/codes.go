package msgpackcodec

import (
	"fmt"

	"github.com/vmihailenco/msgpack/v5/msgpcode"
)

// describe names a MessagePack type byte for an error message.
func describe(c byte) string {
	var what string
	switch {
	case c == msgpcode.Nil:
		what = "nil"
	case c == msgpcode.True || c == msgpcode.False:
		what = "a bool"
	case isUintCode(c) || isIntCode(c):
		what = "an integer"
	case c == msgpcode.Float || c == msgpcode.Double:
		what = "a float"
	case msgpcode.IsString(c):
		what = "a string"
	case msgpcode.IsBin(c):
		what = "a binary"
	case isArrayCode(c):
		what = "an array"
	case isMapCode(c):
		what = "a map"
	case msgpcode.IsExt(c):
		what = "an extension"
	default:
		what = "an unused type byte"
	}
	return fmt.Sprintf("%s (0x%02x)", what, c)
}
