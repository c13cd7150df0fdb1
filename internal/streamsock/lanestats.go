package streamsock

import (
	"sync/atomic"
	"time"

	"github.com/velo-go/velo/ext"
)

// laneCounters are what one lane slot of a peer did, across the
// connections that slot has had: a lane that fails leaves the slot and
// the next send starts a new one, which counts on. Writers add to them
// once per write call, never per frame.
type laneCounters struct {
	frames, bytes atomic.Uint64
	lastWrite     atomic.Int64 // monotonic() at the last write; 0 before one
	dials         atomic.Uint64
}

// wrote counts one write call: frames wholly written and bytes on the
// wire, at now (monotonic).
// Frames are counted last, so that a reader which sees a frame count also
// sees the bytes and the time of the write that carried them.
func (c *laneCounters) wrote(frames int, bytes int64, now time.Duration) {
	if bytes > 0 {
		c.bytes.Add(uint64(bytes))
		c.lastWrite.Store(int64(now))
	}
	if frames > 0 {
		c.frames.Add(uint64(frames))
	}
}

// LaneStats reports each lane to peer (ext.LaneStatser); nil for a peer
// not registered.
func (t *Transport) LaneStats(id ext.InstanceID) []ext.LaneStats {
	p, ok := (*t.peers.Load())[id]
	if !ok {
		return nil
	}
	out := make([]ext.LaneStats, len(p.lanes))
	for i := range p.lanes {
		c := &p.stats[i]
		s := ext.LaneStats{Lane: i, FramesWritten: c.frames.Load(), BytesWritten: c.bytes.Load()}
		if d := c.dials.Load(); d > 1 {
			s.Reconnects = d - 1
		}
		if lw := c.lastWrite.Load(); lw != 0 {
			s.LastWrite = epoch.Add(time.Duration(lw))
		}
		if l := p.lanes[i].Load(); l != nil {
			l.fillStats(&s)
		}
		out[i] = s
	}
	return out
}

// fillStats adds the live lane's connection and queue to s.
func (l *lane) fillStats(s *ext.LaneStats) {
	l.connMu.Lock()
	if l.conn != nil && l.mode.Load() == running {
		s.Connected = true
		s.Remote = l.conn.RemoteAddr().String()
	}
	l.connMu.Unlock()
	l.gate.Drain(func() int {
		for i := range l.segs {
			s.QueuedFrames += l.segs[i].frames
		}
		s.QueuedBytes = l.units
		return 0
	})
	s.Waiting = l.gate.Pending()
}
