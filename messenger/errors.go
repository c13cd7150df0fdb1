package messenger

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"

	"github.com/velo-go/velo/ext"
)

// Errors of the messenger. Check them with errors.Is.
var (
	// ErrRequestTimeout: the call's context deadline passed before the
	// answer came. It also matches context.DeadlineExceeded.
	ErrRequestTimeout error = timeoutError{}
	// ErrShuttingDown: this node, or the remote one, is shutting down.
	ErrShuttingDown = errors.New("velo: shutting down")
	// ErrPeerNotRegistered: no route to the target instance.
	ErrPeerNotRegistered = ext.ErrPeerNotRegistered
	// ErrReservedName: handler names starting with '_' are for the system.
	ErrReservedName = errors.New("velo: handler names starting with '_' are reserved")
	// ErrDuplicateHandler: a handler of that name is already registered.
	ErrDuplicateHandler = errors.New("velo: handler already registered")
	// ErrNoResponseSlot: every response slot is waiting for an answer, and
	// UnaryAsync does not wait for one to free up.
	ErrNoResponseSlot = errors.New("velo: all response slots are in use")
	// ErrLaneFull: an ordered lane over its soft depth refused the message.
	ErrLaneFull = errors.New("velo: ordered lane is full")
	// ErrUnknownHandler: the remote node has no handler of that name.
	ErrUnknownHandler = errors.New("velo: no such handler")
	// ErrOverloaded: the remote node runs as many handlers as it allows
	// and refused the request at once.
	ErrOverloaded = errors.New("velo: node overloaded")
	// ErrPeerUnreachable: the connection to the peer was lost, so the call
	// will get no answer.
	ErrPeerUnreachable = ext.ErrPeerUnreachable
	// ErrPeerRestarted: the node at the peer's address is a new instance;
	// calls meant for the old one are failed, never delivered. Register the
	// new instance (or let discovery find it) to reach it.
	ErrPeerRestarted = errors.New("velo: peer restarted as a new instance")
	// ErrIdentityUnproven: the request came on a connection that did not
	// prove it speaks for the worker the request names (see IdentityStats).
	ErrIdentityUnproven = errors.New("velo: the connection did not prove the sender's identity")
)

type timeoutError struct{}

func (timeoutError) Error() string { return "velo: request timed out" }

// Is makes errors.Is(err, context.DeadlineExceeded) true.
func (timeoutError) Is(target error) bool { return target == context.DeadlineExceeded }

// Timeout reports true, like net.Error.
func (timeoutError) Timeout() bool { return true }

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
	// Code is the remote's code (CodeHeader in the reply), Unknown when it
	// sent none, as a Rust node and a plain Go error do.
	Code Code
	// Reason names the sentinel the remote answered with (ReasonHeader),
	// empty when none.
	Reason string
}

// Is matches the messenger's own sentinel that the reason names, so
// errors.Is(err, ErrLaneFull) holds for a lane that was full over there.
// Other packages' sentinels match through Unwrap.
func (e *RemoteError) Is(target error) bool {
	if e.Reason == "" {
		return false
	}
	s, ok := ownByReason(e.Reason)
	return ok && s.err == target
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

// CodeHeader and ReasonHeader are the keys, in an error Response's header
// map, of the failure's code (in decimal) and of the reason that names its
// sentinel. The reference ignores the map and reads the payload, the
// error's text, so a Rust caller sees the same failure without its code.
const (
	CodeHeader   = "velo-code"
	ReasonHeader = "velo-reason"
)

// appendErrorHeaders encodes the header map of an error Response: the
// code, and the reason when there is one. Keys go in sorted order, as
// EncodeHeaders writes them.
func appendErrorHeaders(b []byte, code Code, reason string) []byte {
	n := byte(1)
	if reason != "" {
		n = 2
	}
	b = append(b, 0x80|n)
	b = appendMsgpackStr(b, CodeHeader)
	b = appendMsgpackStr(b, strconv.FormatUint(uint64(code), 10))
	if reason != "" {
		b = appendMsgpackStr(b, ReasonHeader)
		b = appendMsgpackStr(b, reason)
	}
	return b
}

// parseErrorHeaders reads the code and the reason from an error Response's
// header map. Junk is ignored, never fatal: a map that does not decode, or
// a code that is not a decimal number of 32 bits, reads as Unknown; a
// reason that is not a short name is dropped.
func parseErrorHeaders(hb []byte) (Code, string) {
	if len(hb) == 0 {
		return Unknown, ""
	}
	h, err := DecodeHeaders(hb)
	if err != nil {
		return Unknown, ""
	}
	code, ok := parseCode(h[CodeHeader])
	if !ok || code == OK {
		return Unknown, "" // an error reply is never OK
	}
	reason := h[ReasonHeader]
	if !validReason(reason) {
		reason = ""
	}
	return code, reason
}
