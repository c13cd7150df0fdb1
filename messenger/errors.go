package messenger

import (
	"context"
	"errors"
	"fmt"

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

// remoteCodes names the errors that keep their identity across the wire:
// a reply carries the code in its header map (ErrorCodeHeader), and the
// caller's RemoteError matches the sentinel with errors.Is.
var remoteCodes = map[string]error{
	"unknown_handler":   ErrUnknownHandler,
	"lane_full":         ErrLaneFull,
	"overloaded":        ErrOverloaded,
	"shutting_down":     ErrShuttingDown,
	"peer_restarted":    ErrPeerRestarted,
	"identity_unproven": ErrIdentityUnproven,
}

// codeOf is the wire code of err, or "" when err has none.
func codeOf(err error) string {
	var ce *CodedError
	if he, ok := err.(handlerError); ok {
		// A handler's error carries only the codes it chose to send.
		if errors.As(he.err, &ce) {
			return ce.code
		}
		return ""
	}
	for code, sentinel := range remoteCodes {
		if errors.Is(err, sentinel) {
			return code
		}
	}
	if errors.As(err, &ce) {
		return ce.code
	}
	return ""
}

// CodedError is a sentinel error that keeps its identity across the wire:
// a handler that returns it (or an error wrapping it) answers with its
// code, and the caller's errors.Is(err, sentinel) holds. Packages built on
// the messenger define their own with NewCodedError, so no table of codes
// has to be shared. A Rust node sees only the text.
type CodedError struct{ code, text string }

// NewCodedError makes a sentinel whose code names it on the wire. Codes
// are the package's to choose; prefix them with the package name.
func NewCodedError(code, text string) *CodedError { return &CodedError{code: code, text: text} }

func (e *CodedError) Error() string { return e.text }

// Code is the name the error has on the wire.
func (e *CodedError) Code() string { return e.code }

type timeoutError struct{}

func (timeoutError) Error() string { return "velo: request timed out" }

// Is makes errors.Is(err, context.DeadlineExceeded) true.
func (timeoutError) Is(target error) bool { return target == context.DeadlineExceeded }

// Timeout reports true, like net.Error.
func (timeoutError) Timeout() bool { return true }

// RemoteError is an error returned by the remote handler, or by the remote
// messenger (unknown handler, handler panic, lane full).
type RemoteError struct {
	Handler string
	Message string
	// Code names the failure when the remote gave one (in the reply's
	// header map, under ErrorCodeHeader); empty otherwise.
	Code string
}

// ErrorCodeHeader is the key, in an error Response's header map, of a code
// that names the failure. The reference ignores the map, so the code is an
// addition a Rust node does not see.
const ErrorCodeHeader = "velo-error-code"

// Is matches the sentinel the remote named with its code, so
// errors.Is(err, ErrLaneFull) holds for a lane that was full over there.
func (e *RemoteError) Is(target error) bool {
	if e.Code == "" {
		return false
	}
	if ce, ok := target.(*CodedError); ok {
		return ce.code == e.Code
	}
	sentinel, ok := remoteCodes[e.Code]
	return ok && sentinel == target
}

func (e *RemoteError) Error() string {
	return fmt.Sprintf("velo: remote handler %q: %s", e.Handler, e.Message)
}
