package velo

import "github.com/velo-go/velo/messenger"

// Error codes. A handler returns an error with a code (Errorf, NewError),
// and the caller reads the same code and message (ErrorCode, errors.As
// with an *Error). The numbering is gRPC's; codes from UserCodeMin up are
// the application's. See docs/messaging.md, "Error codes".
type (
	Code  = messenger.Code
	Error = messenger.Error
)

// The well-known codes (gRPC's numbering) and the first user code.
const (
	OK                 = messenger.OK
	Canceled           = messenger.Canceled
	Unknown            = messenger.Unknown
	InvalidArgument    = messenger.InvalidArgument
	DeadlineExceeded   = messenger.DeadlineExceeded
	NotFound           = messenger.NotFound
	AlreadyExists      = messenger.AlreadyExists
	PermissionDenied   = messenger.PermissionDenied
	ResourceExhausted  = messenger.ResourceExhausted
	FailedPrecondition = messenger.FailedPrecondition
	Aborted            = messenger.Aborted
	OutOfRange         = messenger.OutOfRange
	Unimplemented      = messenger.Unimplemented
	Internal           = messenger.Internal
	Unavailable        = messenger.Unavailable
	DataLoss           = messenger.DataLoss
	Unauthenticated    = messenger.Unauthenticated
	UserCodeMin        = messenger.UserCodeMin
)

// NewError returns an error with code and message msg, for a handler to
// return.
func NewError(code Code, msg string) *Error { return messenger.NewError(code, msg) }

// Errorf formats an error with code, as fmt.Errorf does; %w keeps the
// wrapped error visible on this node, and the caller gets the text and the
// code.
func Errorf(code Code, format string, args ...any) *Error {
	return messenger.Errorf(code, format, args...)
}

// NewSentinel makes a sentinel error that keeps its identity across the
// wire: errors.Is(err, sentinel) holds on the caller of a handler that
// returned it. The reason is its unique short name ([a-z0-9_.-], at most
// 64 bytes); NewSentinel panics on a bad one.
func NewSentinel(code Code, reason, msg string) *Error {
	return messenger.NewSentinel(code, reason, msg)
}

// ErrorCode is the code of err: OK for nil, the remote handler's code for
// a call's error, Unknown for an error that names none. The library's own
// errors have codes too (ErrShuttingDown is Unavailable, ErrRequestTimeout
// DeadlineExceeded).
func ErrorCode(err error) Code { return messenger.ErrorCode(err) }

// WithOp names the operation a call serves: a remote failure's text then
// starts with it instead of the handler's name.
func WithOp(op string) CallOption { return messenger.WithOp(op) }
