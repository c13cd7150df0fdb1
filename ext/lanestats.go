package ext

import "time"

// LaneStatser is an optional interface of a Transport: what each of its
// lanes to a peer is doing now, for a live view of the node (velo's
// Snapshot and DebugHandler). A transport without it shows its lanes as
// a count only.
//
// LaneStats must be cheap and must not slow sends: it reads counters the
// lanes keep anyway, under the lanes' own short locks, and returns nil
// for a peer that is not registered. Counters start at zero when the peer
// is registered (again at a new address: new lanes, new counters).
type LaneStatser interface {
	LaneStats(peer InstanceID) []LaneStats
}

// LaneStats is one lane's state and counters. A transport fills what it
// knows and leaves the rest zero.
type LaneStats struct {
	// Lane is the lane's index among the peer's lanes.
	Lane int
	// Connected: the lane holds a live connection (or, on a broker
	// transport, the link it publishes on is up). A lane of a socket
	// transport dials on its first frame, so an unused lane is not.
	Connected bool
	// Remote is the address the lane sends to: the socket's remote
	// address while connected, or what the peer registered.
	Remote string
	// FramesWritten and BytesWritten count what the lane handed to the
	// wire, its framing included where the transport adds any.
	FramesWritten uint64
	BytesWritten  uint64
	// QueuedFrames and QueuedBytes wait in the lane's channel, admitted
	// and not yet written; Waiting counts sends held at its admission
	// gate because the channel is full.
	QueuedFrames int
	QueuedBytes  int
	Waiting      int
	// LastWrite is when the lane last wrote; zero before its first write.
	LastWrite time.Time
	// Reconnects counts the connections the lane opened after its first,
	// where the transport dials its own.
	Reconnects uint64
}

// LaneStatserOf returns the LaneStatser of tr, looking through wrappers
// (TransportWrapper); false when there is none.
func LaneStatserOf(tr Transport) (LaneStatser, bool) {
	for tr != nil {
		if ls, ok := tr.(LaneStatser); ok {
			return ls, true
		}
		w, ok := tr.(TransportWrapper)
		if !ok {
			return nil, false
		}
		tr = w.Unwrap()
	}
	return nil, false
}
