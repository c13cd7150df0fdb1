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
)

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

func (e *RemoteError) Error() string {
	return fmt.Sprintf("velo: remote handler %q: %s", e.Handler, e.Message)
}
