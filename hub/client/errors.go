package client

import (
	"errors"

	"github.com/velo-go/velo/hub/protocol"
)

// HubError is what every error answer of the hub decodes to: the status
// and the ErrorBody's code and message. It matches its code with
// errors.Is (errors.Is(err, protocol.CodeRegisterAgain)).
type HubError = protocol.Error

// ErrNotRegistered: the call needs a registration (a credential) and the
// client holds none, or every handle of the client was closed.
var ErrNotRegistered = errors.New("hub client: not registered")

// ErrClosed: the handle, or every handle of the client, was closed.
var ErrClosed = errors.New("hub client: closed")

// ErrServiceHeld: RegisterService was asked for a name this client
// already serves; the client holds one guard per name.
var ErrServiceHeld = errors.New("hub client: the service is already registered by this client")

// ErrHubUnreachable: the request never reached the hub (connection
// refused, no route, a name that does not resolve, the connect timeout):
// the hub is down or the URL is wrong, and it did nothing. A call by
// service name whose member list must come from the hub fails with it
// too (errors.Is through velo's error).
var ErrHubUnreachable = errors.New("hub client: the hub is unreachable")

// NoAnswerError: the request may have reached the hub, but no answer of
// the hub came back (a timeout, a connection broken after the request
// was sent, a dropped context, or a proxy's page instead of the hub's
// ErrorBody). The hub may have acted on it.
type NoAnswerError struct {
	Op  string
	Err error
}

func (e *NoAnswerError) Error() string {
	return "hub client: " + e.Op + ": no answer from the hub: " + e.Err.Error()
}
func (e *NoAnswerError) Unwrap() error { return e.Err }
