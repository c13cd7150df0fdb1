// Package streamwire holds the byte formats of velo streams, matched byte for
// byte to the Rust reference implementation (ai-dynamo/velo release 0.9,
// files under lib/velo/src/streaming/):
//
//   - the stream frame (Frame, AppendFrame, DecodeFrame), MessagePack as
//     rmp_serde writes StreamFrame<T>, and the byte item fast path
//     (AppendBytesItem, ByteItemBuilder);
//   - the stream anchor handle (AnchorHandle) and the cancel handle
//     (CancelHandle), their u128 layout and their JSON and MessagePack forms;
//   - the JSON bodies of the anchor control messages: _anchor_attach and its
//     answer, _mpsc_anchor_attach and its answer, _anchor_detach,
//     _anchor_finalize, _anchor_cancel, _mpsc_anchor_detach and
//     _stream_cancel;
//   - the per-stream TCP connection: its 16-byte preamble (TCPPreamble) and
//     the messenger frames that carry stream frames on it.
//
// It is codecs only: no anchors, no transports. Every decoder refuses bad
// input with an error that wraps ErrMalformed, never panics, and never
// allocates more than the bytes in front of it justify. docs/wire.md
// describes each format and says who defines it.
package streamwire
