package framepath

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/velo-go/velo/ext"
	"github.com/velo-go/velo/internal/msgerr"
	"github.com/velo-go/velo/streaming/internal/retire"
	"github.com/velo-go/velo/streaming/internal/streamerr"
)

// The producer's stream: its opening, and the egress pump that feeds it
// and sees its end.

// dialTimeout bounds the opening of a stream (the reference's
// TOKEN_READ_TIMEOUT, which bounds the owner's wait for the preamble).
const dialTimeout = 20 * time.Second

// ErrTransportMismatch is returned by an attach whose owner answered a
// transport key that is not this node's frame transport (or named no
// listener of it): the two nodes' per-stream paths run different frame
// transports.
var ErrTransportMismatch = errors.New("velo: the owner's per-stream transport is not this node's")

// Open opens the stream that an attach answer bound for s: it dials the
// owner's listener, whose address entry under key is entry, with the
// route (the anchor's local id and routing, or s's stream id for an owner
// that answered none) and starts the pump and the heartbeats. key is the
// transport the owner answered, which must be this path's; heartbeatMS
// the interval it asked for.
func (n *Node) Open(ctx context.Context, s *Stream, entry []byte, key string, routing, heartbeatMS uint64) error {
	handle, session := s.handle, s.id
	if key != n.key {
		return fmt.Errorf("velo: attach %v: the owner answered transport %q, this node streams over %q: %w", handle, key, n.key, ErrTransportMismatch)
	}
	if entry == nil {
		return fmt.Errorf("velo: attach %v: the owner advertises no %q listener: %w", handle, key, ErrTransportMismatch)
	}
	if routing == 0 {
		routing = session
	}
	dctx, cancel := context.WithTimeout(ctx, dialTimeout)
	defer cancel()
	out, err := n.ft.Dial(dctx, entry, ext.StreamRoute{AnchorID: handle.LocalID(), SessionID: routing})
	if err != nil {
		// The owner waits for this stream until its accept window ends,
		// then its anchor sees ErrSenderDropped.
		return fmt.Errorf("velo: attach %v: open %s stream: %w", handle, key, err)
	}
	s.key, s.out = key, out
	if !n.trackOut(out) {
		out.Close()
		return fmt.Errorf("velo: attach %v: %w", handle, msgerr.ErrShuttingDown)
	}
	go s.pump()
	n.hb.add(s, time.Duration(heartbeatMS)*time.Millisecond)
	return nil
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

// connLossGrace is how long a stream that ended before any message waits
// for the consumer's _stream_cancel, which travels on the messenger's
// connection and may arrive after the close it preceded: a cancel then
// reads as ErrCancelled, not as a lost consumer. A lost node (PeerLost)
// does not wait.
const connLossGrace = 50 * time.Millisecond

// connEnded is the transport's Closed signal, or a failed send: the
// consumer closed the stream (its cancel's backstop) or went away. After
// the terminal was handed on, the end is the stream's own and fail does
// nothing.
func (s *Stream) connEnded() {
	s.mu.Lock()
	if s.cancelled || s.closing || s.lossTimer != nil {
		s.mu.Unlock()
		return
	}
	s.lossTimer = time.AfterFunc(connLossGrace, func() { s.fail(streamerr.ErrConsumerLost) })
	s.mu.Unlock()
}

// pump hands the transport what is queued, all of it in one batch, until
// it has sent the terminal (and the transport confirmed it, or not) or
// the stream failed. Then it closes the transport's stream.
func (s *Stream) pump() {
	n := s.n
	defer n.wg.Done()
	defer n.untrackOut(s.out)
	defer n.hb.remove(s)
	defer n.Unregister(s) // the stream ended: no signal can reach it now
	closed := s.out.Closed()
	var batch [][]byte
	for {
		s.mu.Lock()
		for len(s.q) == 0 && !s.cancelled {
			s.mu.Unlock()
			select {
			case <-s.pumpWake:
			case <-closed:
				closed = nil // seen once: the grace or a cancel follows
				s.connEnded()
			}
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
		s.closing = terminal // the stream's end after this is ours
		s.wakeSpaceLocked()
		s.mu.Unlock()

		err := s.out.Send(batch)
		clear(batch)
		if err != nil {
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
			s.finish()
			return
		}
	}
}

// finish retires the stream once the transport says whether the far end
// took it in whole: Sent, or Discarded.
func (s *Stream) finish() {
	if err := s.out.Finish(context.Background()); err != nil {
		s.n.log.Debug("velo: stream terminal not confirmed", "anchor", s.handle, "err", err)
		s.retire(retire.Discarded)
		return
	}
	s.retire(retire.Sent)
}
