package ext

import "context"

// Transport moves messenger frames between instances. The node starts it
// with a TransportAdapter, registers peers on it and sends through it.
//
// Contract (see docs/transports.md):
//   - Send does not wait for the wire. It returns once the frame reached the
//     send channel of its target (Admitted), or with a Pending admission that
//     resolves in order. A failure after that point goes to the adapter's
//     ReportSendError.
//   - Order holds per lane. Send uses lane 0; a lane never borrows another
//     lane's connection.
//   - Every inbound Message frame goes through adapter.AdmitMessage; other
//     types through adapter.RouteFrame.
//   - Unregister drops what the transport keeps for a peer and closes its
//     connections; it is cheap and idempotent and may be called for a peer
//     that was never registered.
type Transport interface {
	// Key names the transport in a WorkerAddress.
	Key() TransportKey
	// Priority orders transports when several reach a peer; higher wins.
	Priority() int
	// Start binds the transport to the adapter and returns its address entry.
	Start(ctx context.Context, adapter *TransportAdapter) ([]byte, error)
	// Register learns a peer's endpoint from its address.
	Register(peer PeerInfo) error
	// Unregister forgets a peer and closes its connections.
	Unregister(id InstanceID)
	// Send sends on lane 0.
	Send(target InstanceID, f Frame) (SendOutcome, error)
	// SendOnLane sends on lane, 0 <= lane < Lanes(target).
	SendOnLane(target InstanceID, lane int, f Frame) (SendOutcome, error)
	// Lanes is the number of ordered channels the transport keeps to target.
	Lanes(target InstanceID) int
	// MaxMessageSize is the largest header plus payload the transport sends.
	MaxMessageSize() int
	// CheckHealth reports whether target is reachable.
	CheckHealth(ctx context.Context, target InstanceID) error
	// SetObservability gives the transport the handle to record into.
	SetObservability(obs Observability)
	// Shutdown stops the transport. It is called at most once and may block.
	Shutdown()
	// Closed is closed once what the transport admitted is on the wire (or
	// failed) and its listeners are closed.
	Closed() <-chan struct{}
}

// ConnConfirmer is implemented by a transport that fences new outbound
// connections to nodes that hold a connection's requests until it proves
// whose it is (Go nodes; see docs/faults.md). Until such a receiver
// confirms a connection, its dialer sends at most a bounded amount on it
// (well under what the receiver holds), and the rest waits in the lane's
// admission gate; frames marked Urgent pass. So a burst on a new
// connection waits one round trip instead of outgrowing the hold.
//
// The node calls ConfirmConn for an inbound connection of this transport
// once the connection is bound to the peer it speaks for; the transport
// tells that connection's dialer, which lifts its fence. Ids of other
// transports' connections are ignored.
//
// A transport that wraps another (to count or trace its frames) must
// either implement ConnConfirmer itself or implement TransportWrapper, so
// that the node finds the one it wraps. A node that finds no confirmer
// for a transport says so in its log at start: Go peers that dial it
// through that transport then wait out their fence's timeout (5 s) on
// each new connection that carries more than the fence lets through.
type ConnConfirmer interface {
	ConfirmConn(id ConnID)
}

// TransportWrapper is implemented by a transport that wraps another:
// Unwrap returns the wrapped one. The node looks through wrappers for the
// optional interfaces of the transport underneath (ConnConfirmer).
type TransportWrapper interface {
	Unwrap() Transport
}

// ConfirmerOf returns the ConnConfirmer of tr, looking through wrappers
// (TransportWrapper); false when there is none.
func ConfirmerOf(tr Transport) (ConnConfirmer, bool) {
	for tr != nil {
		if cc, ok := tr.(ConnConfirmer); ok {
			return cc, true
		}
		w, ok := tr.(TransportWrapper)
		if !ok {
			return nil, false
		}
		tr = w.Unwrap()
	}
	return nil, false
}

// PeerDiscovery finds the PeerInfo of an instance or worker.
type PeerDiscovery interface {
	// Register publishes this node's PeerInfo.
	Register(ctx context.Context, self PeerInfo) error
	// Unregister withdraws it.
	Unregister(ctx context.Context, id InstanceID) error
	// DiscoverInstance looks up a peer by instance id.
	DiscoverInstance(ctx context.Context, id InstanceID) (PeerInfo, error)
	// DiscoverWorker looks up a peer by worker id.
	DiscoverWorker(ctx context.Context, id WorkerID) (PeerInfo, error)
}

// ServiceDiscovery maps service names to the instances that serve them.
type ServiceDiscovery interface {
	RegisterService(ctx context.Context, service string, id InstanceID) error
	UnregisterService(ctx context.Context, service string, id InstanceID) error
	ListService(ctx context.Context, service string) ([]InstanceID, error)
}

// InstanceBinder is implemented by a transport whose address depends on
// the instance it serves (NATS names its inbound subject after the
// instance id). The node calls BindInstance with its own id before Start;
// a transport started without it makes up an id of its own.
type InstanceBinder interface {
	BindInstance(id InstanceID)
}

// BindInstance tells tr, or the transport it wraps (TransportWrapper),
// which instance it serves, when it is an InstanceBinder.
func BindInstance(tr Transport, id InstanceID) {
	for tr != nil {
		if b, ok := tr.(InstanceBinder); ok {
			b.BindInstance(id)
			return
		}
		w, ok := tr.(TransportWrapper)
		if !ok {
			return
		}
		tr = w.Unwrap()
	}
}
