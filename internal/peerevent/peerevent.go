// Package peerevent holds the messenger's peer events: what
// messenger.Config.OnPeerEvent hears. Its public home is the root package
// velo (velo.PeerEvent, velo.WithPeerEvents), which re-exports every name.
package peerevent

import "github.com/velo-go/velo/ext"

// PeerEventKind says what happened to a peer.
type PeerEventKind uint8

// Peer event kinds. Each is reported once per change of the peer's state,
// never per message.
const (
	// PeerGreeted: this node's handshake with the peer succeeded; calls
	// to it go out from now on.
	PeerGreeted PeerEventKind = iota + 1
	// PeerLost: a transport lost its connection to a greeted peer
	// without a goodbye (a crash, a kill, a cut). Calls waiting on it
	// failed with ErrPeerUnreachable. Redials that fail before the next
	// greeting are not reported again.
	PeerLost
	// PeerShutDown: a greeted peer said goodbye (it shut down in order).
	PeerShutDown
	// PeerRestarted: another instance answers at the peer's address.
	// NewInstance names it; calls to the old instance fail with
	// ErrPeerRestarted.
	PeerRestarted
	// PeerConnected: a transport opened a connection to the peer, the
	// first since this node started or since the peer was last lost.
	// Transport and Remote say which transport and what address. Further
	// lanes to the same peer are not reported again.
	PeerConnected
)

func (k PeerEventKind) String() string {
	switch k {
	case PeerGreeted:
		return "greeted"
	case PeerLost:
		return "lost"
	case PeerShutDown:
		return "shut down"
	case PeerRestarted:
		return "restarted"
	case PeerConnected:
		return "connected"
	}
	return "unknown"
}

// PeerEvent is one change in what this node knows of a peer.
type PeerEvent struct {
	Kind     PeerEventKind
	Instance ext.InstanceID
	Worker   ext.WorkerID
	// NewInstance is the instance that now answers (PeerRestarted only).
	NewInstance ext.InstanceID
	// Transport and Remote are the transport that connected and the
	// address it reached (PeerConnected only).
	Transport ext.TransportKey
	Remote    string
	// Err is the error that calls to the peer failed with (Lost,
	// ShutDown, Restarted); nil for Greeted.
	Err error
}
