package streamwire

import (
	"encoding/binary"
	"fmt"
	"strings"
	"unicode/utf8"

	"github.com/velo-go/velo/internal/mpread"
	"github.com/velo-go/velo/internal/mpwrite"
)

// The stream frame is the reference's StreamFrame<T>
// (lib/velo/src/streaming/frame.rs) as rmp_serde::to_vec writes it: an
// externally tagged enum. A unit variant is its name as a MessagePack
// string; a newtype variant is a map of one entry from its name to its
// value (rmp-serde 1.3.1 encode.rs, serialize_unit_variant and
// serialize_newtype_variant).
//
//	Item(T)                  81 a4 "Item" <T as MessagePack>
//	SenderError(String)      81 ab "SenderError" <str>
//	Dropped                  a7 "Dropped"
//	Detached                 a8 "Detached"
//	Finalized                a9 "Finalized"
//	Heartbeat                a9 "Heartbeat"
//	TransportError(String)   81 ae "TransportError" <str>

// Kind names the variant of a stream frame.
type Kind uint8

// The seven kinds of stream frame. The zero Kind is no frame.
const (
	KindItem Kind = iota + 1
	KindSenderError
	KindDropped
	KindDetached
	KindFinalized
	KindHeartbeat
	KindTransportError
)

var kindNames = [...]string{
	KindItem:           "Item",
	KindSenderError:    "SenderError",
	KindDropped:        "Dropped",
	KindDetached:       "Detached",
	KindFinalized:      "Finalized",
	KindHeartbeat:      "Heartbeat",
	KindTransportError: "TransportError",
}

// String returns the reference's name of the variant.
func (k Kind) String() string {
	if k >= KindItem && k <= KindTransportError {
		return kindNames[k]
	}
	return fmt.Sprintf("Kind(%d)", uint8(k))
}

// Valid reports whether k is one of the seven kinds.
func (k Kind) Valid() bool { return k >= KindItem && k <= KindTransportError }

// IsTerminal reports whether a frame of this kind ends the stream: Dropped,
// Detached, Finalized and TransportError, as the reference's
// is_terminal_sentinel (lib/velo/src/streaming/sender.rs) decides.
func (k Kind) IsTerminal() bool {
	return k == KindDropped || k == KindDetached || k == KindFinalized || k == KindTransportError
}

// The encodings of the four frames without a value. The reference caches
// the same bytes (sender.rs, cached_dropped and the others) and compares
// against them.
const (
	DroppedFrame   = "\xa7Dropped"
	DetachedFrame  = "\xa8Detached"
	FinalizedFrame = "\xa9Finalized"
	HeartbeatFrame = "\xa9Heartbeat"
)

// HeartbeatBytes is HeartbeatFrame as the one slice every sender queues,
// so that a beat allocates nothing. Nothing may write to it.
var HeartbeatBytes = []byte(HeartbeatFrame)

// DetectionMultiplier is how many heartbeat intervals of silence end a
// stream: the reader's watchdog, on both paths, waits this many before it
// gives up on the producer.
const DetectionMultiplier = 3

// Frame is one decoded stream frame.
type Frame struct {
	Kind Kind
	// Item is the item's value as MessagePack (exactly one value), for
	// KindItem. After DecodeFrame it aliases the input.
	Item []byte
	// Message is the text of a SenderError or TransportError.
	Message string
}

// ItemBytes returns the payload of an Item whose value is a MessagePack
// binary (what the reference writes for a bytes::Bytes item), aliasing
// the frame. ok is false for any other frame.
func (f Frame) ItemBytes() (payload []byte, ok bool) {
	if f.Kind != KindItem {
		return nil, false
	}
	if v := f.Item; len(v) >= 2 && v[0] == 0xc4 && int(v[1]) == len(v)-2 {
		// A bin 8, what a token is: read without the general reader,
		// which cost more than the rest of a consumer's take of it.
		return v[2:], true
	}
	r := mpread.New(f.Item, ErrMalformed)
	t, err := r.Byte()
	if err != nil || t < 0xc4 || t > 0xc6 {
		return nil, false
	}
	n, err := r.BigEndian(1 << (t - 0xc4))
	if err != nil || n != uint64(r.Len()) {
		return nil, false
	}
	return f.Item[r.Offset():], true
}

// AppendFrame appends the encoding of f. An Item must hold exactly one
// MessagePack value; the other fields of f that its kind does not use must
// be empty.
func AppendFrame(dst []byte, f Frame) ([]byte, error) {
	switch f.Kind {
	case KindItem:
		if f.Message != "" {
			return dst, fmt.Errorf("velo: an Item frame has no message")
		}
		r := mpread.New(f.Item, ErrMalformed)
		if err := r.Skip(); err != nil || r.Len() != 0 {
			return dst, fmt.Errorf("velo: an Item frame must hold exactly one MessagePack value")
		}
		return AppendItem(dst, f.Item), nil
	case KindSenderError, KindTransportError:
		if f.Item != nil {
			return dst, fmt.Errorf("velo: a %v frame has no item", f.Kind)
		}
		return AppendErrorFrame(dst, f.Kind, f.Message), nil
	case KindDropped, KindDetached, KindFinalized, KindHeartbeat:
		if f.Item != nil || f.Message != "" {
			return dst, fmt.Errorf("velo: a %v frame carries nothing", f.Kind)
		}
		return mpwrite.AppendStr(dst, kindNames[f.Kind]), nil
	}
	return dst, fmt.Errorf("velo: no stream frame of %v", f.Kind)
}

// AppendItem appends an Item frame around item, the value already encoded
// as one MessagePack value. It does not check item.
func AppendItem(dst, item []byte) []byte {
	dst = append(dst, 0x81, 0xa4, 'I', 't', 'e', 'm')
	return append(dst, item...)
}

// BytesItemLen is the length of the frame AppendBytesItem appends for a
// payload of n bytes.
func BytesItemLen(n int) int {
	switch {
	case n < 256:
		return 6 + 2 + n
	case n < 1<<16:
		return 6 + 3 + n
	}
	return 6 + 5 + n
}

// AppendBytesItem appends an Item frame whose value is payload as a
// MessagePack binary of the smallest width: the bytes rmp_serde writes for
// StreamFrame::Item(bytes::Bytes). ByteItemBuilder writes the same item
// with a fixed 5-byte bin32 length; a decoder takes either.
func AppendBytesItem(dst, payload []byte) []byte {
	dst = append(dst, 0x81, 0xa4, 'I', 't', 'e', 'm')
	dst = mpwrite.AppendBinHeader(dst, len(payload))
	return append(dst, payload...)
}

// BytesItem is AppendBytesItem into a new slice of the frame's length.
func BytesItem(payload []byte) []byte {
	return AppendBytesItem(make([]byte, 0, BytesItemLen(len(payload))), payload)
}

// AppendErrorFrame appends a SenderError or TransportError frame. Text
// that is not UTF-8 has its bad bytes replaced with U+FFFD, because the
// reference's String cannot hold them and would refuse the frame. It
// panics on any other kind, a programming error.
func AppendErrorFrame(dst []byte, kind Kind, text string) []byte {
	if kind != KindSenderError && kind != KindTransportError {
		panic("wire: AppendErrorFrame of " + kind.String())
	}
	dst = append(dst, 0x81)
	dst = mpwrite.AppendStr(dst, kindNames[kind])
	return mpwrite.AppendStr(dst, validUTF8(text))
}

// DecodeFrame reads one stream frame that fills b. The Item of the result
// aliases b. It accepts what rmp_serde writes, with a string or map length
// in any MessagePack width, and refuses anything else: see docs/wire.md.
func DecodeFrame(b []byte) (Frame, error) {
	if f, ok := decodeBytesItem(b); ok {
		return f, nil
	}
	return decodeFrame(b)
}

// decodeBytesItem reads the frame that AppendBytesItem writes, a token's
// frame, without the general reader: the map of one "Item" whose value is
// a binary filling the rest of b. It says false for anything else, which
// decodeFrame then reads (and decodes the same way if it is one of these).
func decodeBytesItem(b []byte) (Frame, bool) {
	if tokenPayloadAt(b) == 0 {
		return Frame{}, false
	}
	return Frame{Kind: KindItem, Item: b[len(tokenPrefix):]}, true
}

// tokenPrefix is how the frame that AppendBytesItem writes begins: a map
// of one entry, the key "Item".
const tokenPrefix = "\x81\xa4Item"

// tokenPayloadAt is where the payload of b starts when b is the frame
// that AppendBytesItem writes (decodeBytesItem), or 0 when it is not. It
// is the one reading of that frame for decodeBytesItem and for
// BytesItemPayload, which a consumer calls per token: reading the payload
// off a Frame that decodeBytesItem returned copied the Frame out of a call
// and read its binary's header twice, a third of an inlet's take.
func tokenPayloadAt(b []byte) int {
	if len(b) < len(tokenPrefix)+2 || string(b[:len(tokenPrefix)]) != tokenPrefix {
		return 0
	}
	v := b[len(tokenPrefix):]
	switch v[0] {
	case 0xc4:
		if 2+int(v[1]) == len(v) {
			return len(tokenPrefix) + 2
		}
	case 0xc5:
		if len(v) >= 3 && 3+(int(v[1])<<8|int(v[2])) == len(v) {
			return len(tokenPrefix) + 3
		}
	}
	return 0
}

// BytesItemPayload returns the payload of b when b is the frame that
// AppendBytesItem writes (a token), aliasing b; ok is false for any other
// frame, which DecodeFrame then reads. A consumer that reads bytes takes a
// token with it in one step, not a Frame and then its binary.
func BytesItemPayload(b []byte) (payload []byte, ok bool) {
	at := tokenPayloadAt(b)
	if at == 0 {
		return nil, false
	}
	return b[at:], true
}

func decodeFrame(b []byte) (Frame, error) {
	// The four sentinels by comparison first.
	switch string(b) {
	case DroppedFrame:
		return Frame{Kind: KindDropped}, nil
	case DetachedFrame:
		return Frame{Kind: KindDetached}, nil
	case FinalizedFrame:
		return Frame{Kind: KindFinalized}, nil
	case HeartbeatFrame:
		return Frame{Kind: KindHeartbeat}, nil
	}
	r := mpread.New(b, ErrMalformed)
	t, ok := r.Peek()
	if !ok {
		return Frame{}, malformed("empty stream frame")
	}
	if !mpread.IsMap(t) {
		// A unit variant: a string and nothing after it.
		name, err := r.StrUTF8()
		if err != nil {
			return Frame{}, malformed("stream frame: neither a variant name nor a map (0x%02x)", t)
		}
		if r.Len() != 0 {
			return Frame{}, malformed("stream frame: %d bytes after the variant", r.Len())
		}
		k := kindOf(name)
		if k == 0 {
			return Frame{}, malformed("stream frame: unknown variant %q", name)
		}
		if k == KindItem || k == KindSenderError || k == KindTransportError {
			return Frame{}, malformed("stream frame: %v without its value", k)
		}
		return Frame{Kind: k}, nil
	}
	n, err := r.MapLen()
	if err != nil {
		return Frame{}, err
	}
	if n != 1 {
		return Frame{}, malformed("stream frame: a map of %d entries, not 1", n)
	}
	name, err := r.StrUTF8()
	if err != nil {
		return Frame{}, err
	}
	k := kindOf(name)
	switch k {
	case KindItem:
		start := r.Offset()
		if err := r.Skip(); err != nil {
			return Frame{}, err
		}
		if r.Len() != 0 {
			return Frame{}, malformed("stream frame: %d bytes after the item", r.Len())
		}
		return Frame{Kind: KindItem, Item: b[start:len(b):len(b)]}, nil
	case KindSenderError, KindTransportError:
		msg, err := r.StrUTF8()
		if err != nil {
			return Frame{}, err
		}
		if r.Len() != 0 {
			return Frame{}, malformed("stream frame: %d bytes after the message", r.Len())
		}
		return Frame{Kind: k, Message: string(msg)}, nil
	case 0:
		return Frame{}, malformed("stream frame: unknown variant %q", name)
	}
	return Frame{}, malformed("stream frame: %v is a unit variant, not a map", k)
}

func kindOf(name []byte) Kind {
	for k := KindItem; k <= KindTransportError; k++ {
		if string(name) == kindNames[k] {
			return k
		}
	}
	return 0
}

// IsTerminalFrame reports whether the encoded frame b ends its stream:
// the reference's is_terminal_sentinel. The three sentinels without a
// value are a byte comparison; a TransportError costs a decode.
func IsTerminalFrame(b []byte) bool {
	switch string(b) {
	case DroppedFrame, DetachedFrame, FinalizedFrame:
		return true
	}
	if len(b) >= 8 && string(b[:6]) == "\x81\xa4Item" {
		return false // a token: the common case, settled by its first bytes
	}
	// Read the variant name first, so that an Item costs no walk over its
	// value.
	r := mpread.New(b, ErrMalformed)
	if t, ok := r.Peek(); !ok || !mpread.IsMap(t) {
		return false // and no error built for a unit variant
	}
	if n, err := r.MapLen(); err != nil || n != 1 {
		return false
	}
	if name, err := r.StrUTF8(); err != nil || string(name) != "TransportError" {
		return false
	}
	f, err := DecodeFrame(b)
	return err == nil && f.Kind == KindTransportError
}

// ByteItemHeaderLen is the size of the header ByteItemBuilder reserves:
// 81 a4 'I' 't' 'e' 'm' c6 <u32 BE length>.
const ByteItemHeaderLen = 11

// byteItemPrefix is the header up to the length.
const byteItemPrefix = "\x81\xa4Item\xc6"

// ByteItemBuilder writes a byte Item frame in place: it reserves the
// 11-byte header, the caller appends the payload, and Finish writes the
// payload's length into the header. The length is always a bin32, so the
// frame may be up to 3 bytes longer than AppendBytesItem's; both decode
// the same.
type ByteItemBuilder struct {
	buf []byte
}

// NewByteItemBuilder returns a builder whose buffer has room for the header
// and a payload of capacity bytes.
func NewByteItemBuilder(capacity int) *ByteItemBuilder {
	buf := make([]byte, ByteItemHeaderLen, ByteItemHeaderLen+max(capacity, 0))
	copy(buf, byteItemPrefix)
	return &ByteItemBuilder{buf: buf}
}

// Buffer returns the frame buffer, which already holds the header. Append
// the payload to *Buffer(); do not change the first ByteItemHeaderLen
// bytes.
func (b *ByteItemBuilder) Buffer() *[]byte { return &b.buf }

// Write appends p to the payload. It never fails while the builder is
// open, so the builder is an io.Writer for an encoder.
func (b *ByteItemBuilder) Write(p []byte) (int, error) {
	if b.buf == nil {
		return 0, ErrBuilderFinished
	}
	b.buf = append(b.buf, p...)
	return len(p), nil
}

// ErrBuilderFinished is returned by a ByteItemBuilder used after Finish.
var ErrBuilderFinished = fmt.Errorf("velo: byte item builder already finished")

// ErrHeaderChanged is returned by Finish when the reserved header no
// longer holds what the builder wrote.
var ErrHeaderChanged = fmt.Errorf("velo: byte item header was changed")

// Finish writes the payload length into the header and returns the frame.
// It refuses a frame whose header was changed or cut, and a payload of
// 4 GiB or more. The builder is spent after a successful Finish.
func (b *ByteItemBuilder) Finish() ([]byte, error) {
	if b.buf == nil {
		return nil, ErrBuilderFinished
	}
	if len(b.buf) < ByteItemHeaderLen || string(b.buf[:len(byteItemPrefix)]) != byteItemPrefix ||
		binary.BigEndian.Uint32(b.buf[len(byteItemPrefix):]) != 0 {
		return nil, ErrHeaderChanged
	}
	n := uint64(len(b.buf) - ByteItemHeaderLen)
	if n > 0xffffffff {
		return nil, fmt.Errorf("velo: byte item payload of %d bytes does not fit a bin32", n)
	}
	binary.BigEndian.PutUint32(b.buf[len(byteItemPrefix):], uint32(n))
	out := b.buf
	b.buf = nil
	return out, nil
}

// validUTF8 returns s with each run of invalid bytes replaced by U+FFFD.
func validUTF8(s string) string {
	if utf8.ValidString(s) {
		return s
	}
	return strings.ToValidUTF8(s, "\uFFFD")
}
