package msgerr

import (
	"context"
	"errors"
	"fmt"
)

// Error is an error with a Code. A handler that returns one (or an error
// that wraps one) answers its caller with the code and the message, and
// the caller's error unwraps to an *Error that carries both:
//
//	return nil, velo.Errorf(velo.NotFound, "no user %d", id)
//
//	var e *velo.Error
//	if errors.As(err, &e) && e.Code() == velo.NotFound { ... }
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
	if !ValidReason(reason) {
		panic(fmt.Sprintf("velo: sentinel reason %q is not 1 to %d bytes of [a-z0-9_.-]", reason, MaxReason))
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
	code, _ := Classify(err)
	return code
}

// Classify finds err's code and reason, as ErrorCode and the wire see them.
func Classify(err error) (Code, string) {
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
