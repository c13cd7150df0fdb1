package msgerr

import (
	"errors"
	"fmt"
	"strings"
)

// RemoteError is an error returned by the remote handler, or by the remote
// messenger (unknown handler, handler panic, lane full). It unwraps to an
// *Error with the remote's code, reason and message, so errors.As(err,
// &e) with e an *Error reads them, and errors.Is matches the sentinel the
// reason names.
type RemoteError struct {
	Handler string
	// Op names the operation the call served (WithOp); when set, the
	// error's text starts with it instead of the handler's name.
	Op      string
	Message string
	// Code is the remote's code (the code header of the reply), Unknown
	// when it sent none, as a Rust node and a plain Go error do.
	Code Code
	// Reason names the sentinel the remote answered with (the reason
	// header), empty when none.
	Reason string
}

// Is matches the messenger's own sentinel that the reason names, so
// errors.Is(err, ErrLaneFull) holds for a lane that was full over there.
// Other packages' sentinels match through Unwrap.
func (e *RemoteError) Is(target error) bool {
	if e.Reason == "" {
		return false
	}
	s, ok := OwnByReason(e.Reason)
	return ok && s == target
}

// Unwrap is the remote's failure as an *Error.
func (e *RemoteError) Unwrap() error {
	return &Error{code: e.Code, reason: e.Reason, msg: e.Message}
}

func (e *RemoteError) Error() string {
	if e.Op != "" {
		return e.Op + ": " + trimOpPrefix(e.Op, e.Message)
	}
	return fmt.Sprintf("velo: remote handler %q: %s", e.Handler, e.Message)
}

// trimOpPrefix drops a package prefix from msg that the op repeats:
// "rendezvous get" and "rendezvous: handle not found" make
// "rendezvous get: handle not found".
func trimOpPrefix(op, msg string) string {
	pkg, _, ok := strings.Cut(op, " ")
	if ok && strings.HasPrefix(msg, pkg+": ") {
		return msg[len(pkg)+2:]
	}
	return msg
}

// NameOp is WithOp after the fact, for calls that take no options or whose
// options cost on a hot path: it sets the Op of the RemoteError in err's
// chain, if there is one, and returns err.
func NameOp(err error, op string) error {
	var re *RemoteError
	if errors.As(err, &re) {
		re.Op = op
	}
	return err
}
