package hub

import (
	"fmt"
	"log/slog"
	"slices"
	"time"

	"github.com/velo-go/velo"
)

// AttachContext is what an extension's Attach sees: the extensions it
// requires (already attached), the hub's authority, its velo node and its
// limits.
type AttachContext struct {
	hub      *Hub
	self     Extension
	attached map[string]Extension
}

// Extension returns the extension named name, which must be in the
// caller's Requires (so a missing declaration fails at once) and is
// attached already.
func (ac *AttachContext) Extension(name string) (Extension, error) {
	if !slices.Contains(ac.self.Requires(), name) {
		return nil, fmt.Errorf("hub: extension %s uses %s but does not require it", ac.self.Name(), name)
	}
	e := ac.attached[name]
	if e == nil {
		return nil, fmt.Errorf("hub: extension %s is not attached", name)
	}
	return e, nil
}

// Authority is the hub's authority, for routes and handlers that
// authorize an owner's credential.
func (ac *AttachContext) Authority() *Authority { return ac.hub.auth }

// Node is the hub's velo node, nil when the hub runs without velo. A
// handler that uses it calls it on each request; it must not keep the
// node alive past the hub's Shutdown.
func (ac *AttachContext) Node() *velo.Node { return ac.hub.node }

// StepTimeout is step_timeout_ms.
func (ac *AttachContext) StepTimeout() time.Duration { return ac.hub.cfg.stepTimeout() }

// Logger is the hub's logger.
func (ac *AttachContext) Logger() *slog.Logger { return ac.hub.log.With("extension", ac.self.Name()) }

// Required finds a required extension by name and type; see
// AttachContext.Extension.
func Required[T Extension](ac *AttachContext, name string) (T, error) {
	var zero T
	e, err := ac.Extension(name)
	if err != nil {
		return zero, err
	}
	t, ok := e.(T)
	if !ok {
		return zero, fmt.Errorf("hub: extension %s is a %T, not a %T", name, e, zero)
	}
	return t, nil
}
