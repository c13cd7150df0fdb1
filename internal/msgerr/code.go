package msgerr

import "strconv"

// Code says what kind of failure an error is, in numbers a caller can act
// on: retry (Unavailable, ResourceExhausted), fix the request
// (InvalidArgument) or give up (NotFound). The values are gRPC's, so that a
// grpc-go user reads them as codes.Code; codes from UserCodeMin up are the
// application's own.
type Code uint32

// The well-known codes, numbered as gRPC numbers them.
const (
	OK                 Code = 0  // not an error
	Canceled           Code = 1  // the caller cancelled
	Unknown            Code = 2  // an error that names no code
	InvalidArgument    Code = 3  // the request is wrong, whatever the state
	DeadlineExceeded   Code = 4  // the deadline passed first
	NotFound           Code = 5  // what the request names does not exist
	AlreadyExists      Code = 6  // what the request creates exists already
	PermissionDenied   Code = 7  // the caller may not do this
	ResourceExhausted  Code = 8  // a limit or a quota is full; later may work
	FailedPrecondition Code = 9  // the state does not allow it (already done)
	Aborted            Code = 10 // a conflict ended it; retry the whole step
	OutOfRange         Code = 11 // past a valid range
	Unimplemented      Code = 12 // no such operation here
	Internal           Code = 13 // a bug on the other side
	Unavailable        Code = 14 // the node cannot serve now; retry elsewhere or later
	DataLoss           Code = 15 // bytes were lost or corrupted
	Unauthenticated    Code = 16 // the caller did not prove who it is

	// UserCodeMin is the first code an application may define. Codes
	// between Unauthenticated and UserCodeMin are kept for this library.
	UserCodeMin Code = 1000
)

var codeNames = [...]string{
	"OK", "Canceled", "Unknown", "InvalidArgument", "DeadlineExceeded", "NotFound",
	"AlreadyExists", "PermissionDenied", "ResourceExhausted", "FailedPrecondition",
	"Aborted", "OutOfRange", "Unimplemented", "Internal", "Unavailable", "DataLoss",
	"Unauthenticated",
}

// String is the code's name (as grpc-go spells it), or "Code(n)" for one
// this library does not name.
func (c Code) String() string {
	if int(c) < len(codeNames) {
		return codeNames[c]
	}
	return "Code(" + strconv.FormatUint(uint64(c), 10) + ")"
}

// ParseCode reads the decimal form an error reply's code header carries.
// It takes only plain digits, at most 10 of them, that fit 32 bits;
// anything else is junk and reported as not ok.
func ParseCode(s string) (Code, bool) {
	if len(s) == 0 || len(s) > 10 {
		return 0, false
	}
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return 0, false
		}
	}
	n, err := strconv.ParseUint(s, 10, 32)
	if err != nil {
		return 0, false
	}
	return Code(n), true
}

// ValidReason reports whether s can be a reason on the wire: 1 to
// MaxReason bytes of lower-case ASCII letters, digits and '_', '.' or '-'.
func ValidReason(s string) bool {
	if len(s) == 0 || len(s) > MaxReason {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !(c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '_' || c == '.' || c == '-') {
			return false
		}
	}
	return true
}

// MaxReason bounds a reason: a short name, not a message.
const MaxReason = 64
