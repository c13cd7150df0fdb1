package velo

import "github.com/velo-go/velo/messenger"

// PeerEvent is one change in what a node knows of a peer: greeted, lost,
// shut down or restarted (see messenger.PeerEvent).
type (
	PeerEvent     = messenger.PeerEvent
	PeerEventKind = messenger.PeerEventKind
)

// Peer event kinds.
const (
	PeerGreeted   = messenger.PeerGreeted
	PeerLost      = messenger.PeerLost
	PeerShutDown  = messenger.PeerShutDown
	PeerRestarted = messenger.PeerRestarted
)

// WithPeerEvents calls fn each time a peer of this node is greeted (its
// handshake succeeded), lost (its connection ended without a goodbye),
// shut down (it said goodbye) or restarted (another instance answers at
// its address), as nats.go's connection handlers do for a server. Each
// event is also logged at Info through WithLogger's logger. fn runs on the
// goroutine that noticed the change, often a transport's reader: it must
// return quickly (hand the event to a channel of your own to do more).
func WithPeerEvents(fn func(PeerEvent)) Option {
	return Option{apply: func(c *messenger.Config) { c.OnPeerEvent = fn }}
}
