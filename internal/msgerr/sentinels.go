package msgerr

import (
	"context"
	"errors"

	"github.com/velo-go/velo/ext"
)

// The messenger's errors. Package messenger re-exports those an
// application matches, and velo re-exports them again; the docs of each
// are there.
var (
	ErrRequestTimeout    error = timeoutError{}
	ErrShuttingDown            = errors.New("velo: shutting down")
	ErrPeerNotRegistered       = ext.ErrPeerNotRegistered
	ErrReservedName            = errors.New("velo: handler names starting with '_' are reserved")
	ErrDuplicateHandler        = errors.New("velo: handler already registered")
	ErrNoResponseSlot          = errors.New("velo: all response slots are in use")
	ErrLaneFull                = errors.New("velo: ordered lane is full")
	ErrUnknownHandler          = errors.New("velo: no such handler")
	ErrOverloaded              = errors.New("velo: node overloaded")
	ErrPeerUnreachable         = ext.ErrPeerUnreachable
	ErrPeerUntrusted           = ext.ErrPeerUntrusted
	ErrPeerRestarted           = errors.New("velo: peer restarted as a new instance")
	ErrCallerCancelled         = errors.New("velo: the caller cancelled the call")
	ErrCallerLost              = errors.New("velo: the caller is gone")
)

// ErrIdentityUnproven: the request came on a connection that did not
// prove it speaks for the worker the request names (the messenger's
// identity gate).
var ErrIdentityUnproven = errors.New("velo: the connection did not prove the sender's identity")

// ErrStagedFetchTimeout is the error a caller gets when the receiver's
// StagedFetchTimeout ended the fetch of its payload.
var ErrStagedFetchTimeout = errors.New("velo: the staged payload was not fetched in time")

type timeoutError struct{}

func (timeoutError) Error() string { return "velo: request timed out" }

// Is makes errors.Is(err, context.DeadlineExceeded) true.
func (timeoutError) Is(target error) bool { return target == context.DeadlineExceeded }

// Timeout reports true, like net.Error.
func (timeoutError) Timeout() bool { return true }

// ownSentinel gives one of the messenger's errors its code and reason.
type ownSentinel struct {
	err    error
	code   Code
	reason string
}

// ownSentinels are the messenger's errors with their codes. Those a remote
// messenger answers with (unknown handler, lane full, ...) keep their
// identity across the wire through the reason.
var ownSentinels = []ownSentinel{
	{ErrUnknownHandler, Unimplemented, "unknown_handler"},
	{ErrLaneFull, ResourceExhausted, "lane_full"},
	{ErrOverloaded, ResourceExhausted, "overloaded"},
	{ErrShuttingDown, Unavailable, "shutting_down"},
	{ErrPeerRestarted, Unavailable, "peer_restarted"},
	{ErrIdentityUnproven, Unauthenticated, "identity_unproven"},
	{ErrStagedFetchTimeout, DeadlineExceeded, "staged_fetch_timeout"},
	// Before ErrPeerUnreachable, which a trust failure also matches: the
	// first match names the code.
	{ErrPeerUntrusted, Unauthenticated, "peer_untrusted"},
	{ErrPeerUnreachable, Unavailable, "peer_unreachable"},
	{ErrPeerNotRegistered, Unavailable, "peer_not_registered"},
	{ErrNoResponseSlot, ResourceExhausted, "no_response_slot"},
	{ErrCallerCancelled, Canceled, "caller_cancelled"},
	{ErrCallerLost, Canceled, "caller_lost"},
	{ErrReservedName, InvalidArgument, "reserved_name"},
	{ErrDuplicateHandler, AlreadyExists, "duplicate_handler"},
}

// OwnByReason returns the messenger's sentinel that reason names, ok false
// for another reason (another package's sentinel, or none).
func OwnByReason(reason string) (error, bool) {
	if reason == "" {
		return nil, false
	}
	for _, s := range ownSentinels {
		if s.reason == reason {
			return s.err, true
		}
	}
	return nil, false
}
