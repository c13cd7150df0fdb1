package client

import (
	"errors"
	"fmt"

	"github.com/velo-go/velo/ext"
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
// the hub is down or the URL is wrong, and it did nothing. It matches
// ext.ErrDiscoveryUnavailable too, so velo's service resolver keeps the
// members it last learned; a call by service name that never learned
// them fails with it (errors.Is through velo's error).
var ErrHubUnreachable error = &unreachable{}

// unreachable is ErrHubUnreachable's type: it unwraps to
// ext.ErrDiscoveryUnavailable.
type unreachable struct{}

func (*unreachable) Error() string { return "hub client: the hub is unreachable" }
func (*unreachable) Unwrap() error { return ext.ErrDiscoveryUnavailable }

// unavailable marks an error of a read (a service listing or watch) that
// got no usable answer from the hub: no answer at all, a proxy's page,
// or the hub's own unavailable. The hub said nothing about the service,
// so it matches ext.ErrDiscoveryUnavailable.
func unavailable(err error) error {
	if err == nil || errors.Is(err, ext.ErrDiscoveryUnavailable) {
		return err
	}
	if isNoAnswer(err) || errors.Is(err, protocol.CodeUnavailable) {
		return fmt.Errorf("%w: %w", ext.ErrDiscoveryUnavailable, err)
	}
	return err
}

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
