package msgpeers

import (
	"time"

	"github.com/velo-go/velo/ext"
)

// LinkStater is an optional interface of a Writer: whether its link is up
// and the address it sends to. A Writer without it shows its lane
// connected while the peer is registered, at the address it registered.
type LinkStater interface {
	LinkState() (connected bool, remote string)
}

// writeAll hands batch, as take returned it, to the Writer and counts it.
// The Writer reports
// the frames it fails with Lane.Failed, which takes them off the count.
func (l *Lane) writeAll(batch []ext.Frame) {
	l.w.WriteAll(batch)
	if len(batch) == 0 {
		return
	}
	bytes := l.takenBytes // take summed them: no walk of the batch here
	l.handedFrames.Add(uint64(len(batch)))
	l.handedBytes.Add(uint64(bytes))
	l.lastWrite.Store(time.Now().UnixNano())
}

// Failed reports a frame of a batch the Writer could not send (as
// Core.Failed does) and takes it off the lane's written count.
func (l *Lane) Failed(f ext.Frame, err error) {
	l.failedFrames.Add(1)
	l.failedBytes.Add(uint64(f.Len()))
	l.c.Failed(l.target, f, err)
}

// LaneStats reports each lane to target (ext.LaneStatser); nil for a peer
// not registered. Bytes are headers and payloads, without the wire's
// framing.
func (c *Core) LaneStats(target ext.InstanceID) []ext.LaneStats {
	p := c.peer(target)
	if p == nil {
		return nil
	}
	out := make([]ext.LaneStats, len(p.lanes))
	for i, l := range p.lanes {
		out[i] = l.stats(p.addr)
	}
	return out
}

func (l *Lane) stats(addr string) ext.LaneStats {
	// A frame failed mid-batch is counted before its batch is, so a read
	// in between may see more failed than handed: min keeps it at zero.
	ff, fb := l.failedFrames.Load(), l.failedBytes.Load()
	hf, hb := l.handedFrames.Load(), l.handedBytes.Load()
	s := ext.LaneStats{Lane: l.index, Remote: addr, FramesWritten: hf - min(ff, hf), BytesWritten: hb - min(fb, hb)}
	select {
	case <-l.gone:
	default:
		s.Connected = true
	}
	if ls, ok := l.w.(LinkStater); ok && s.Connected {
		s.Connected, s.Remote = ls.LinkState()
	}
	if lw := l.lastWrite.Load(); lw != 0 {
		s.LastWrite = time.Unix(0, lw)
	}
	l.gate.Drain(func() int {
		s.QueuedFrames = len(l.q)
		for i := range l.q {
			s.QueuedBytes += l.q[i].Len()
		}
		return 0
	})
	s.Waiting = l.gate.Pending()
	return s
}
