package velo

import (
	"time"

	"github.com/velo-go/velo/ext"
)

// LaneSnapshot is one lane of a transport to a peer, as the transport
// reports it (ext.LaneStats): whether it holds a connection, where to,
// what it wrote and when, what waits in its channel, and how often it
// connected again. A transport that reports no lanes (one without
// ext.LaneStatser) adds none; the peer's Lanes count still shows.
type LaneSnapshot struct {
	Transport string `json:"transport"`
	Lane      int    `json:"lane"`
	Connected bool   `json:"connected"`
	Remote    string `json:"remote,omitempty"`
	// FramesWritten and BytesWritten count what the lane handed to the
	// wire since the peer was registered; BytesWritten includes the
	// transport's framing where it adds any (TCP, UDS, QUIC, TLS).
	FramesWritten uint64 `json:"frames_written"`
	BytesWritten  uint64 `json:"bytes_written"`
	// QueuedFrames and QueuedBytes are admitted and not yet written;
	// Waiting counts sends held at the lane's gate, its channel full.
	QueuedFrames int `json:"queued_frames"`
	QueuedBytes  int `json:"queued_bytes"`
	Waiting      int `json:"waiting"`
	// LastWrite is absent before the lane's first write.
	LastWrite  *time.Time `json:"last_write,omitempty"`
	Reconnects uint64     `json:"reconnects"`
}

// laneStatsers maps the node's transports that report their lanes by key.
func laneStatsers(trs []ext.Transport) map[ext.TransportKey]ext.LaneStatser {
	out := make(map[ext.TransportKey]ext.LaneStatser, len(trs))
	for _, t := range trs {
		if ls, ok := ext.LaneStatserOf(t); ok {
			out[t.Key()] = ls
		}
	}
	return out
}

// laneSnapshots lists the lanes to peer of each transport that reaches
// it, in the order given (the primary first).
func laneSnapshots(by map[ext.TransportKey]ext.LaneStatser, peer ext.InstanceID, keys []ext.TransportKey) []LaneSnapshot {
	var out []LaneSnapshot
	for _, k := range keys {
		ls := by[k]
		if ls == nil {
			continue
		}
		for _, s := range ls.LaneStats(peer) {
			l := LaneSnapshot{Transport: string(k), Lane: s.Lane, Connected: s.Connected, Remote: s.Remote,
				FramesWritten: s.FramesWritten, BytesWritten: s.BytesWritten, QueuedFrames: s.QueuedFrames,
				QueuedBytes: s.QueuedBytes, Waiting: s.Waiting, Reconnects: s.Reconnects}
			if !s.LastWrite.IsZero() {
				t := s.LastWrite
				l.LastWrite = &t
			}
			out = append(out, l)
		}
	}
	return out
}

// primaryFirst orders a peer's transport keys with its primary first.
func primaryFirst(primary ext.TransportKey, keys []ext.TransportKey) []ext.TransportKey {
	out := make([]ext.TransportKey, 0, len(keys)+1)
	seen := false
	for _, k := range keys {
		seen = seen || k == primary
	}
	if seen {
		out = append(out, primary)
	}
	for _, k := range keys {
		if k != primary {
			out = append(out, k)
		}
	}
	return out
}
