package velo

import (
	"github.com/velo-go/velo/internal/msgerr"
	"github.com/velo-go/velo/internal/msgrx"
)

// Error codes. A handler returns an error with a code (Errorf, NewError),
// and the caller reads the same code and message (ErrorCode, errors.As
// with an *Error). The numbering is gRPC's; codes from UserCodeMin up are
// the application's. See docs/messaging.md, "Error codes".
type (
	// Code says what kind of failure an error is (Code.String names it as
	// grpc-go does).
	Code = msgerr.Code
	// Error is an error with a Code (Error.Code), a message
	// (Error.Message) and, for a sentinel, a reason (Error.Reason), the
	// short name by which errors.Is matches it across the wire. Errorf's
	// %w stays visible on this node (Error.Unwrap).
	Error = msgerr.Error
)

// The well-known codes (gRPC's numbering) and the first user code.
const (
	OK                 = msgerr.OK
	Canceled           = msgerr.Canceled
	Unknown            = msgerr.Unknown
	InvalidArgument    = msgerr.InvalidArgument
	DeadlineExceeded   = msgerr.DeadlineExceeded
	NotFound           = msgerr.NotFound
	AlreadyExists      = msgerr.AlreadyExists
	PermissionDenied   = msgerr.PermissionDenied
	ResourceExhausted  = msgerr.ResourceExhausted
	FailedPrecondition = msgerr.FailedPrecondition
	Aborted            = msgerr.Aborted
	OutOfRange         = msgerr.OutOfRange
	Unimplemented      = msgerr.Unimplemented
	Internal           = msgerr.Internal
	Unavailable        = msgerr.Unavailable
	DataLoss           = msgerr.DataLoss
	Unauthenticated    = msgerr.Unauthenticated
	UserCodeMin        = msgerr.UserCodeMin
)

// NewError returns an error with code and message msg, for a handler to
// return.
func NewError(code Code, msg string) *Error { return msgerr.NewError(code, msg) }

// Errorf formats an error with code, as fmt.Errorf does; %w keeps the
// wrapped error visible on this node, and the caller gets the text and the
// code.
func Errorf(code Code, format string, args ...any) *Error {
	return msgerr.Errorf(code, format, args...)
}

// NewSentinel makes a sentinel error that keeps its identity across the
// wire: errors.Is(err, sentinel) holds on the caller of a handler that
// returned it. The reason is its unique short name ([a-z0-9_.-], at most
// 64 bytes); NewSentinel panics on a bad one.
func NewSentinel(code Code, reason, msg string) *Error {
	return msgerr.NewSentinel(code, reason, msg)
}

// ErrorCode is the code of err: OK for nil, the remote handler's code for
// a call's error, Unknown for an error that names none. The library's own
// errors have codes too (ErrShuttingDown is Unavailable, ErrRequestTimeout
// DeadlineExceeded).
func ErrorCode(err error) Code { return msgerr.ErrorCode(err) }

// WithOp names the operation a call serves: a remote failure's text then
// starts with it instead of the handler's name.
func WithOp(op string) CallOption { return msgrx.WithOp(op) }
