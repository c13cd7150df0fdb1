// Package streamerr holds the errors of package streaming: the sentinels
// and error types that the stream machinery (the inlet, the mux, the
// per-stream path) returns. Package streaming re-exports each one under
// the same name, so errors.Is and errors.As see one value and one type
// whichever package made the error. The documentation of each is on its
// re-export.
package streamerr

import (
	"errors"
	"fmt"
)

// ItemTooLargeError is an item over the limit of its path.
type ItemTooLargeError struct {
	Size, Limit int
}

func (e *ItemTooLargeError) Error() string {
	return fmt.Sprintf("velo: stream item of %d bytes exceeds the limit of %d", e.Size, e.Limit)
}

// The sentinels. Their texts are part of the public API (streaming).
var (
	ErrSenderDropped     = errors.New("velo: stream sender dropped")
	ErrCancelled         = errors.New("velo: stream cancelled")
	ErrStopRequested     = errors.New("velo: stream stop requested")
	ErrConsumerLost      = errors.New("velo: stream consumer lost")
	ErrOpenerLost        = errors.New("velo: stream opener lost before it attached")
	ErrAnchorNotFound    = errors.New("velo: stream anchor not found")
	ErrAlreadyAttached   = errors.New("velo: stream anchor already attached")
	ErrRemoteAttach      = errors.New("velo: an anchor on another worker needs a Manager from NewNodeManager")
	ErrAnchorKind        = errors.New("velo: stream anchor handle of the wrong kind")
	ErrSenderClosed      = errors.New("velo: stream sender already finalized, detached or closed")
	ErrUnsupportedItem   = errors.New("velo: unsupported stream item type")
	ErrBadOption         = errors.New("velo: bad stream anchor option")
	ErrUnattachedTimeout = errors.New("velo: stream anchor unattached timeout")
	ErrManagerClosed     = errors.New("velo: stream manager closed")
	ErrNoPrebind         = errors.New("velo: cannot pre-bind this anchor")
	ErrTicketOnOwner     = errors.New("velo: a stream open ticket is for a producer on another node")
	ErrAttachTimeout     = errors.New("velo: the anchor's owner did not answer the attach")
)

// SenderError is streaming.SenderError: a soft error the producer put in
// the stream.
type SenderError struct {
	Message string
}

func (e *SenderError) Error() string { return "velo: stream sender error: " + e.Message }

// TransportError is streaming.TransportError: the end of a stream whose
// delivery failed.
type TransportError struct {
	Message string
}

func (e *TransportError) Error() string { return "velo: stream transport error: " + e.Message }

// ItemError is streaming.ItemError: an item its codec could not encode or
// decode.
type ItemError struct {
	Err error
}

func (e *ItemError) Error() string { return fmt.Sprintf("velo: stream item: %v", e.Err) }

// Unwrap returns the codec's error.
func (e *ItemError) Unwrap() error { return e.Err }
