// Package mpread reads MessagePack values out of a byte slice by hand, for
// the decoders that run per frame or per request (messenger headers,
// stream frames and handles, event handles, TCP address entries, peer
// records) and so cannot afford the reflection of internal/msgpackcodec.
//
// A Reader never allocates on success: strings and binaries come back as
// slices of its input, and a Reader kept in a local variable stays on the
// stack. Each error wraps the sentinel the caller gave New, so every
// package keeps reporting its own kind of malformed input; the reader only
// adds what went wrong and where.
//
// Lengths are checked against what is left before anything is sliced, and
// Skip walks nested values with a counter rather than recursion, so hostile
// input costs neither memory nor stack.
package mpread
