package messenger

import (
	"context"
	"errors"
	"fmt"
)

// Error is an error with a Code. A handler that returns one (or an error
// that wraps one) answers its caller with the code and the message, and
// the caller's error unwraps to an *Error that carries both:
//
//	return nil, messenger.Errorf(messenger.NotFound, "no user %d", id)
//
//	var e *messenger.Error
//	if errors.As(err, &e) && e.Code() == messenger.NotFound { ... }
//
// An Error made with NewSentinel also has a reason, a short name that
// crosses the wire, so that errors.Is(err, sentinel) holds on the caller.
type Error struct {
	code    Code
	reason  string
	msg     string
	wrapped error // on this node only; only the text crosses the wire
}

// NewError returns an error with code and message msg. OK is no error's
// code: an Error made with it reads as Unknown (ErrorCode, the wire).
func NewError(code Code, msg string) *Error { return &Error{code: code, msg: msg} }

// Errorf formats an error with code, as fmt.Errorf does. An error it
// wraps with %w stays visible to errors.Is and errors.As on this node;
// a caller on another node gets the text and the code.
func Errorf(code Code, format string, args ...any) *Error {
	err := fmt.Errorf(format, args...)
	e := &Error{code: code, msg: err.Error()}
	switch err.(type) {
	case interface{ Unwrap() error }, interface{ Unwrap() []error }:
		e.wrapped = err // one %w or several
	}
	return e
}

// NewSentinel makes a package's sentinel error that keeps its identity
// across the wire: the remote answers with its code and reason, and the
// caller's errors.Is(err, sentinel) holds. The reason must be unique to
// the sentinel, 1 to 64 bytes of [a-z0-9_.-], prefixed with the package
// name ("rendezvous_not_found"); NewSentinel panics on another, since
// sentinels are package variables and a bad one is a bug to meet at init.
func NewSentinel(code Code, reason, msg string) *Error {
	if !validReason(reason) {
		panic(fmt.Sprintf("velo: sentinel reason %q is not 1 to %d bytes of [a-z0-9_.-]", reason, maxReason))
	}
	return &Error{code: code, reason: reason, msg: msg}
}

func (e *Error) Error() string { return e.msg }

// Code is the error's code.
func (e *Error) Code() Code { return e.code }

// Reason names the sentinel the error is, empty for none.
func (e *Error) Reason() string { return e.reason }

// Message is the error's text, as the handler wrote it.
func (e *Error) Message() string { return e.msg }

// Unwrap leads to the errors that Errorf's %w wrapped, on the node that
// made it; nil for an error that wraps none, and on the caller's node.
func (e *Error) Unwrap() error { return e.wrapped }

// Is matches two errors of the same reason: the one rebuilt from a reply
// and the sentinel it names.
func (e *Error) Is(target error) bool {
	t, ok := target.(*Error)
	return ok && e.reason != "" && t.reason == e.reason
}

// ErrorCode is the code of err: OK for nil, the code of the *Error it
// wraps (a remote failure always has one), the code of the messenger's
// own errors (ErrShuttingDown is Unavailable, ErrRequestTimeout
// DeadlineExceeded, ...), Canceled and DeadlineExceeded for the context's
// errors, and Unknown for any other.
func ErrorCode(err error) Code {
	if err == nil {
		return OK
	}
	code, _ := classify(err)
	return code
}

// classify finds err's code and reason.
func classify(err error) (Code, string) {
	var e *Error
	if errors.As(err, &e) {
		if e.code == OK {
			return Unknown, e.reason // an error is never OK
		}
		return e.code, e.reason
	}
	for _, s := range ownSentinels {
		if errors.Is(err, s.err) {
			return s.code, s.reason
		}
	}
	switch {
	case errors.Is(err, context.DeadlineExceeded):
		return DeadlineExceeded, ""
	case errors.Is(err, context.Canceled):
		return Canceled, ""
	}
	return Unknown, ""
}

// wireCode is what a reply carrying err says beyond its text: a code and a
// reason, or ok false for a plain error (a Nack or an error Response
// without headers, as the reference sends).
//
// A handler's own error (handlerError) never carries the reason of one of
// the messenger's sentinels, even when it wraps one (a downstream call
// that met ErrShuttingDown): the reason would tell the caller that this
// node is shutting down. Its code still goes.
func wireCode(err error) (Code, string, bool) {
	if he, ok := err.(handlerError); ok {
		code, reason := classify(he.err)
		if _, own := ownByReason(reason); own {
			reason = ""
		}
		return code, reason, code != Unknown || reason != ""
	}
	code, reason := classify(err)
	return code, reason, code != Unknown || reason != ""
}

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
	{ErrPeerUnreachable, Unavailable, "peer_unreachable"},
	{ErrPeerNotRegistered, Unavailable, "peer_not_registered"},
	{ErrNoResponseSlot, ResourceExhausted, "no_response_slot"},
	{ErrCallerCancelled, Canceled, "caller_cancelled"},
	{ErrCallerLost, Canceled, "caller_lost"},
	{ErrReservedName, InvalidArgument, "reserved_name"},
	{ErrDuplicateHandler, AlreadyExists, "duplicate_handler"},
}

func ownByReason(reason string) (ownSentinel, bool) {
	if reason == "" {
		return ownSentinel{}, false
	}
	for _, s := range ownSentinels {
		if s.reason == reason {
			return s, true
		}
	}
	return ownSentinel{}, false
}
