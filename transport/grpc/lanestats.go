package grpc

import (
	"sync/atomic"
	"time"

	"github.com/velo-go/velo/ext"
)

// laneCounters are what one lane slot of a peer wrote, across the streams
// it has had (a lane lives for one stream). The writer adds to them once
// per batch.
type laneCounters struct {
	frames, bytes atomic.Uint64
	lastWrite     atomic.Int64 // unix nanos; 0 before the first write
	streams       atomic.Uint64
}

func (c *laneCounters) wrote(frames, bytes int) {
	if frames == 0 {
		return
	}
	c.frames.Add(uint64(frames))
	c.bytes.Add(uint64(bytes))
	c.lastWrite.Store(time.Now().UnixNano())
}

// LaneStats reports each lane to target (ext.LaneStatser): whether its
// stream is open, the peer's address, the frames and bytes (framed, as
// sent in gRPC messages) written, what is queued and the streams opened
// after the first. Nil for a peer not registered.
func (t *Transport) LaneStats(target ext.InstanceID) []ext.LaneStats {
	t.peersMu.Lock()
	p, ok := t.peers[target]
	t.peersMu.Unlock()
	if !ok {
		return nil
	}
	p.mu.Lock()
	lanes := append([]*lane(nil), p.lanes...)
	p.mu.Unlock()
	out := make([]ext.LaneStats, len(lanes))
	for i, l := range lanes {
		c := &p.stats[i]
		s := ext.LaneStats{Lane: i, Remote: p.addr, FramesWritten: c.frames.Load(), BytesWritten: c.bytes.Load()}
		if n := c.streams.Load(); n > 1 {
			s.Reconnects = n - 1
		}
		if lw := c.lastWrite.Load(); lw != 0 {
			s.LastWrite = time.Unix(0, lw)
		}
		if l != nil {
			s.Connected = l.open.Load()
			l.gate.Drain(func() int {
				s.QueuedFrames = len(l.queue)
				for _, f := range l.queue {
					s.QueuedBytes += f.Len()
				}
				return 0
			})
			s.Waiting = l.gate.Pending()
		}
		out[i] = s
	}
	return out
}
