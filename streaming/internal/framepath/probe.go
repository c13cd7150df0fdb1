package framepath

import "github.com/velo-go/velo/ext"

// Counters and probes of the path. Package streaming reads the counters
// for its Manager's hooks (internal/streamx) and its tests reach into the
// path through the probes; nothing on a stream's path calls them.

// WatchdogFirings counts the streams the readers' watchdog ended.
func (n *Node) WatchdogFirings() uint64 { return n.firings.Load() }

// StrangerSignals counts the stops, cancels and MPSC detaches ignored
// because they did not come from the worker they concern.
func (n *Node) StrangerSignals() uint64 { return n.strangerSignals.Load() }

// StrangerControls counts the detaches, finalizes and cancels ignored
// because they did not come from the bound producer.
func (n *Node) StrangerControls() uint64 { return n.strangerControls.Load() }

// PendingBinds counts the streams bound and waiting for their connection.
func (n *Node) PendingBinds() int {
	n.mu.Lock()
	defer n.mu.Unlock()
	return len(n.pending)
}

// Conns counts the streams of both ends.
func (n *Node) Conns() int {
	n.mu.Lock()
	defer n.mu.Unlock()
	return len(n.ins) + len(n.outs)
}

// PauseHeartbeats stops (or resumes) the heartbeats of every stream of
// the node: a producer that went silent, for tests of the watchdog.
func (n *Node) PauseHeartbeats(paused bool) { n.hb.paused.Store(paused) }

// Heartbeats counts the heartbeats queued.
func (n *Node) Heartbeats() uint64 { return n.hb.beats.Load() }

// Beaten counts the streams the heartbeater beats.
func (n *Node) Beaten() int {
	n.hb.mu.Lock()
	defer n.hb.mu.Unlock()
	return len(n.hb.senders)
}

// Conn is the transport's stream, nil before it opened.
func (s *Stream) Conn() ext.FrameSender { return s.out }

// WaitingForRoom reports whether a Push waits for room in the egress.
func (s *Stream) WaitingForRoom() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.spaceWait != nil
}
