package hub

import (
	"context"
	"encoding/json"

	"github.com/velo-go/velo/ext"
	"github.com/velo-go/velo/hub/protocol"
	"github.com/velo-go/velo/hub/store"
)

// Extension is state the hub hosts per registration: it sees every
// registration of every instance and every removal, and may serve routes
// under /v1/ext/{name}/. Embed BaseExtension for the hooks it does not need.
//
// The hub calls Prepare, Commit (on the Staged value), OnRegistered and
// OnRemoved under one hub-wide registration lock, so nothing changes an
// extension's state between its Prepare and its Commit.
type Extension interface {
	// Name is the extension's wire name: one URL segment of [a-z0-9_-],
	// the key of its registration payload and of its routes.
	Name() string
	// Requires names the extensions that must attach and start first.
	Requires() []string
	// Admit runs before the registration lock: it refuses (400) a payload
	// that does not fit the hub's config. payload is nil when the
	// registrant did not opt in.
	Admit(owner ext.InstanceID, payload json.RawMessage) error
	// Prepare runs under the lock before the store write, under
	// step_timeout_ms. It can fail; it may only hide or revoke, and the
	// Staged value's Abort undoes that.
	Prepare(ctx context.Context, r *Registration) (Staged, error)
	// OnRegistered runs once the credential is live, under
	// step_timeout_ms; the hub stops waiting at the deadline. Work that
	// waits goes on a goroutine of its own.
	OnRegistered(ctx context.Context, r *Registration)
	// OnRemoved: incarnation left the store. Drop the owner's state if it
	// belongs to that incarnation or an older one.
	OnRemoved(owner ext.InstanceID, incarnation store.Incarnation)
}

// Staged is what Prepare made ready. Exactly one of Commit and Abort is
// called. Commit cannot fail; Abort undoes whatever Prepare hid.
type Staged interface {
	// Commit applies the registration; r.Incarnation is the store's.
	Commit(r *Registration)
	Abort()
}

// Registration is what an extension hook is told about one registration.
type Registration struct {
	Owner ext.InstanceID
	Peer  ext.PeerInfo
	// Epoch is the epoch this registration mints.
	Epoch protocol.Epoch
	// Incarnation is the store's incarnation of the write: zero in
	// Prepare, set from Commit on.
	Incarnation store.Incarnation
	// Payload is the registrant's payload for this extension, nil when it
	// did not opt in.
	Payload json.RawMessage
	// Renewal is true for a re-registration of a live registration
	// (presenting its credential). A fresh registration and a recovery
	// after a hub restart are not renewals: the extension sees the owner
	// as new.
	Renewal bool
}

// Attacher is an optional interface of an Extension: Attach runs at
// startup in dependency order, before any extension starts.
type Attacher interface {
	Attach(ac *AttachContext) error
}

// Starter is an optional interface of an Extension: Start runs at
// startup in dependency order, after every Attach.
type Starter interface {
	Start(ctx context.Context) error
}

// Stopper is an optional interface of an Extension. StopBackground ends
// the extension's background work early in Shutdown; Shutdown runs later,
// in reverse start order, under shutdown_timeout_ms.
type Stopper interface {
	StopBackground()
	Shutdown(ctx context.Context) error
}

// PublicRouter is an optional interface: its routes go on the public
// listener, under /v1/ext/{name}/.
type PublicRouter interface {
	PublicRoutes(r *Routes)
}

// ControlRouter is an optional interface: its routes go on the control
// listener, under /v1/ext/{name}/.
type ControlRouter interface {
	ControlRoutes(r *Routes)
}

// BaseExtension gives an Extension no requirements and no-op hooks.
type BaseExtension struct{}

// Requires names nothing.
func (BaseExtension) Requires() []string { return nil }

// Admit accepts every payload.
func (BaseExtension) Admit(ext.InstanceID, json.RawMessage) error { return nil }

// Prepare stages nothing.
func (BaseExtension) Prepare(context.Context, *Registration) (Staged, error) { return NoStage{}, nil }

// OnRegistered does nothing.
func (BaseExtension) OnRegistered(context.Context, *Registration) {}

// OnRemoved does nothing.
func (BaseExtension) OnRemoved(ext.InstanceID, store.Incarnation) {}

// NoStage is a Staged value with nothing to commit or undo.
type NoStage struct{}

// Commit does nothing.
func (NoStage) Commit(*Registration) {}

// Abort does nothing.
func (NoStage) Abort() {}

// Bundle adds a set of extensions to a hub. A program adds each bundle
// once; two bundles that require a third share the one instance of it.
type Bundle interface {
	// Name is the bundle's name: one URL segment of [a-z0-9_-], and the
	// key of its config section, bundles.{name}.
	Name() string
	// Requires names the bundles that must be added too.
	Requires() []string
	// Extensions builds the bundle's extensions from its config section
	// (nil when the config has none). It does no I/O.
	Extensions(section json.RawMessage) ([]Extension, error)
}
