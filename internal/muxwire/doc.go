// Package muxwire is the byte format of the messenger mux: the payload of one
// _stream_batch active message, version 2 (transport key
// "messenger-mux-v2"). The Rust reference ai-dynamo/velo, release 0.9,
// speaks version 1, described in its lib/velo/src/streaming/BATCHING.md;
// version 2 adds lanes and the LifecycleSlot record (docs/mux-wire.md).
//
// A batch is a 16-byte header followed by records, each a 13-byte header
// and a body. Every multi-byte field is big-endian.
//
// The package is pure: no goroutines, no I/O, no locks. The batcher builds
// batches with an Encoder that appends into a buffer it owns and reuses, so
// steady-state encoding allocates nothing. Ingress checks a whole batch with
// Decode before it applies any record of it, then walks the records with a
// Reader; each record body is a sub-slice of the payload, never a copy.
//
// Decode refuses every byte it cannot account for (unknown types and
// reasons, bodies of the wrong size, lengths past the end, a record count
// that disagrees with the bytes, trailing bytes, a wire version other than
// 2, reserved flag bits). Each refusal is a *DecodeError that matches
// ErrMalformed and one more specific sentinel under errors.Is. A decoder
// never panics and never allocates on the success path; a length field is
// only trusted once the bytes behind it are in hand.
//
// docs/mux-wire.md describes the format in prose.
package muxwire
