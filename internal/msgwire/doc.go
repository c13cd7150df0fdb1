// Package msgwire holds what the messenger's wire format spells and its
// sibling packages need too: response types and ids, the header map codec
// and its limits, and the names of the headers and address keys the
// messenger reads. It is a codec: no goroutines, no I/O. The frame
// layouts themselves (request, response and ack headers) stay in
// messenger, their only user; docs/wire.md describes both.
package msgwire
