package velo

import (
	"github.com/velo-go/velo/internal/peerevent"
	"github.com/velo-go/velo/messenger"
)

// PeerEvent is one change in what a node knows of a peer: connected,
// greeted, lost, shut down or restarted. Kind says which; Instance and
// Worker name the peer; NewInstance is the instance that now answers
// (PeerRestarted); Transport and Remote are the transport that connected
// and the address it reached (PeerConnected); Err is the error calls to
// the peer failed with (lost, shut down, restarted). PeerEventKind's
// String names the kind ("greeted", "lost", ...).
type (
	PeerEvent     = peerevent.PeerEvent
	PeerEventKind = peerevent.PeerEventKind
)

// Peer event kinds.
const (
	PeerGreeted   = peerevent.PeerGreeted
	PeerLost      = peerevent.PeerLost
	PeerShutDown  = peerevent.PeerShutDown
	PeerRestarted = peerevent.PeerRestarted
	PeerConnected = peerevent.PeerConnected
)

// WithPeerEvents calls fn each time a peer of this node is connected (a
// transport reached it, first since it was last lost), greeted (its
// handshake succeeded), lost (its connection ended without a goodbye),
// shut down (it said goodbye) or restarted (another instance answers at
// its address), as nats.go's connection handlers do for a server. Each
// event is also logged at Info through WithLogger's logger, at most 10
// lines a second after a burst of 50. fn runs on a goroutine of its own,
// one event at a time, in order; a slow fn delays only later events, and
// past 1,024 waiting events new ones are dropped (and the drop is logged
// at shutdown).
func WithPeerEvents(fn func(PeerEvent)) Option {
	return Option{apply: func(c *messenger.Config) { c.OnPeerEvent = fn }}
}
