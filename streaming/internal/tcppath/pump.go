package tcppath

import (
	"context"
	"fmt"
	"time"

	"github.com/velo-go/velo/internal/msgerr"
	wire "github.com/velo-go/velo/internal/streamwire"
	"github.com/velo-go/velo/streaming/internal/retire"
	"github.com/velo-go/velo/streaming/internal/streamerr"
)

// The producer's connection: its opening, the egress pump that writes it
// and the watcher that sees its end.

// Open opens the connection that an attach answer bound for s: it dials
// the owner's listener at addr, writes the preamble (routing, or s's
// stream id for an owner that answered none) and starts the pump, the
// watcher and the heartbeats. key is the transport the owner answered,
// which must be this path's; heartbeatMS the interval it asked for.
func (n *Node) Open(ctx context.Context, s *Stream, addr, key string, routing, heartbeatMS uint64) error {
	handle, session := s.handle, s.id
	if key != n.key || addr == "" {
		return fmt.Errorf("velo: attach %v: the owner answered transport %q, which this node cannot use", handle, key)
	}
	if routing == 0 {
		routing = session
	}
	dctx, cancel := context.WithTimeout(ctx, preambleTimeout)
	defer cancel()
	conn, err := n.network.Dial(dctx, addr)
	if err != nil {
		// The owner waits for this connection until its accept window
		// ends, then its anchor sees ErrSenderDropped.
		return fmt.Errorf("velo: attach %v: dial %s: %w", handle, addr, err)
	}
	pre := wire.TCPPreamble{AnchorID: handle.LocalID(), SessionID: routing}.Append(make([]byte, 0, 64))
	conn.SetWriteDeadline(deadlineOf(dctx))
	if _, err := conn.Write(pre); err != nil {
		conn.Close()
		return fmt.Errorf("velo: attach %v: write preamble: %w", handle, err)
	}
	conn.SetWriteDeadline(time.Time{})
	s.key, s.conn = key, conn
	if !n.track(conn, 2) {
		conn.Close()
		return fmt.Errorf("velo: attach %v: %w", handle, msgerr.ErrShuttingDown)
	}
	go s.pump()
	go s.watch()
	n.hb.add(s, time.Duration(heartbeatMS)*time.Millisecond)
	return nil
}

func deadlineOf(ctx context.Context) time.Time {
	d, _ := ctx.Deadline()
	return d
}

// awaitFail waits for fail: the cancel message, the node's loss or the
// grace of connEnded.
func (s *Stream) awaitFail() {
	for {
		s.mu.Lock()
		c := s.cancelled
		s.mu.Unlock()
		if c {
			return
		}
		<-s.pumpWake
	}
}

// connLossGrace is how long a connection that ended before any message
// waits for the consumer's _stream_cancel, which travels on the
// messenger's connection and may arrive after the close it preceded: a
// cancel then reads as ErrCancelled, not as a lost consumer. A lost node
// (PeerLost) does not wait.
const connLossGrace = 50 * time.Millisecond

// connEnded is the watcher's end, or a failed write: the consumer closed
// the connection (its cancel's backstop) or went away. Closed by this
// side (Close, the terminal written), fail does nothing.
func (s *Stream) connEnded() {
	s.mu.Lock()
	if s.cancelled || s.closing || s.lossTimer != nil {
		s.mu.Unlock()
		return
	}
	s.lossTimer = time.AfterFunc(connLossGrace, func() { s.fail(streamerr.ErrConsumerLost) })
	s.mu.Unlock()
}

// pump writes what is queued, all of it in one write, until it has written
// the terminal or the connection failed. Then it closes the connection.
func (s *Stream) pump() {
	n := s.n
	defer n.wg.Done()
	defer n.untrack(s.conn)
	defer n.hb.remove(s)
	defer n.Unregister(s) // the stream ended: no signal can reach it now
	var buf []byte
	var batch [][]byte
	for {
		s.mu.Lock()
		for len(s.q) == 0 && !s.cancelled {
			s.mu.Unlock()
			<-s.pumpWake
			s.mu.Lock()
		}
		if s.cancelled {
			// Nothing queued is handed on; a terminal that was queued
			// is discarded.
			s.q = nil
			s.mu.Unlock()
			s.retire(retire.Discarded)
			return
		}
		batch, s.q = s.q, batch[:0]
		// done is set as the terminal is queued, and nothing is queued
		// after it: the terminal is the last frame of this batch.
		terminal := s.done
		s.closing = terminal // the watcher's wake-up after this is ours
		s.wakeSpaceLocked()
		s.mu.Unlock()

		buf = buf[:0]
		for i, f := range batch {
			buf = wire.AppendTCPFrame(buf, f)
			batch[i] = nil
		}
		if _, err := s.conn.Write(buf); err != nil {
			s.mu.Lock()
			s.closing = false
			s.mu.Unlock()
			s.connEnded() // most often the consumer's cancel closed it
			s.awaitFail() // registered until then: the cancel message may follow
			s.retire(retire.Discarded)
			return
		}
		if met := n.met; met != nil {
			met.EgressFlushed(len(batch))
		}
		if terminal {
			s.retire(retire.Sent)
			return
		}
		if cap(buf) > 1<<20 {
			buf = nil // do not keep a large item's buffer for the rest of the stream
		}
	}
}

// watch waits for the consumer to close the connection. The consumer never
// writes, so any return of Read is the end of the connection.
func (s *Stream) watch() {
	defer s.n.wg.Done()
	var b [1]byte
	s.conn.Read(b[:])
	// The consumer closed the connection (or wrote, which it must not), or
	// Close closed it; fail does nothing once the pump wrote the
	// terminal and closed it itself.
	s.connEnded()
}
