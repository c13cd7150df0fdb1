package ext

import (
	"context"
	"errors"
)

// ErrPeerNotFound: no discovery backend knows the instance or worker asked
// for. Backends wrap it so that callers can test with errors.Is.
var ErrPeerNotFound = errors.New("velo: peer not found through discovery")

// ErrDiscoveryUnavailable: a discovery backend could not reach its source
// of truth (no connection, no answer, or the source said it cannot serve
// now), so it knows nothing new; it says nothing about the peers or
// services asked for. Backends wrap it so that callers can test with
// errors.Is: velo's service resolver then keeps using the members it last
// learned instead of failing the call.
var ErrDiscoveryUnavailable = errors.New("velo: discovery backend unavailable")

// Registration is what a guarded registration returns. Unregister removes
// the entry; it is safe to call more than once.
type Registration interface {
	Unregister(ctx context.Context) error
}

// PeerRegistrar is an optional interface of a PeerDiscovery: it publishes a
// PeerInfo and hands back a guard that withdraws it.
type PeerRegistrar interface {
	RegisterPeer(ctx context.Context, self PeerInfo) (Registration, error)
}

// ServiceRegistrar is an optional interface of a ServiceDiscovery: it adds
// an instance to a service and hands back a guard that removes it.
type ServiceRegistrar interface {
	RegisterServiceInstance(ctx context.Context, service string, id InstanceID) (Registration, error)
}

// ServiceLister is an optional interface of a ServiceDiscovery: the names
// of the services that have at least one instance.
type ServiceLister interface {
	ListServices(ctx context.Context) ([]string, error)
}

// ServiceEventKind says what a ServiceEvent reports.
type ServiceEventKind uint8

const (
	// ServiceInitial carries the instances present when the watch began.
	ServiceInitial ServiceEventKind = iota + 1
	// ServiceAdded: one instance joined.
	ServiceAdded
	// ServiceRemoved: one instance left.
	ServiceRemoved
	// ServiceDisconnected: the watch lost its backend; it is the last event.
	ServiceDisconnected
)

// ServiceEvent is one change seen by a service watch.
type ServiceEvent struct {
	Kind ServiceEventKind
	// IDs holds every instance for ServiceInitial, one for Added and Removed.
	IDs []InstanceID
}

// ServiceWatcher is an optional interface of a ServiceDiscovery. The
// channel first carries a ServiceInitial event, then changes; it is closed
// when ctx ends or after a ServiceDisconnected event.
type ServiceWatcher interface {
	WatchService(ctx context.Context, service string) (<-chan ServiceEvent, error)
}

// PeerWatcher is an optional interface of a PeerDiscovery whose entries can
// vanish on their own (a lease that expired). The channel carries the
// instance id of each peer whose registration disappeared; it is closed
// when ctx ends or the watch breaks.
type PeerWatcher interface {
	WatchPeerRemovals(ctx context.Context) (<-chan InstanceID, error)
}
