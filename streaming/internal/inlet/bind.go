package inlet

import (
	"io"

	"github.com/velo-go/velo/ext"
	"github.com/velo-go/velo/streaming/internal/streamerr"
)

// The per-stream producer's bind (framepath's bind) as the inlet
// keeps it: who may end the stream by a control message, when its
// connection counts as come, and when it is forgotten. Every read and
// write of the bind (extra.bind) is here, under mu.

// TakeBindFrom detaches the remote bind for a control message from asker
// and returns it (nil when no per-stream producer is bound). A stranger
// takes nothing (ok false): only the bound producer, or the producer whose
// mux slot feeds the anchor, may end its stream.
func (st *State) TakeBindFrom(asker ext.WorkerID) (b Bind, ok bool) {
	st.mu.Lock()
	defer st.mu.Unlock()
	b = st.bindLocked()
	if (b != nil && b.Producer() != asker) || (st.feed != nil && st.feed.slot.Peer() != asker) {
		return nil, false
	}
	st.setBindLocked(nil)
	return b, true
}

// ConnectBind records that bind b's connection c came. It is gone when the
// consumer cancelled or closed, or a control message ended the stream,
// before it came: closing c is then how the producer hears of it.
func (st *State) ConnectBind(b Bind, c io.Closer) (gone, cancelled bool) {
	st.mu.Lock()
	defer st.mu.Unlock()
	cancelled = st.cancelled
	gone = cancelled || st.closed || b.Proxy().done
	if !gone {
		b.SetConn(c)
	}
	return gone, cancelled
}

// IsAttached says whether a producer holds the anchor: one on this
// worker, or a mux slot. (A per-stream bind is checked apart: TakeBindFrom.)
func (st *State) IsAttached() bool {
	st.mu.Lock()
	defer st.mu.Unlock()
	return st.attached
}

// DropBind ends the stream of bind b with Dropped, as a connection that
// ended without a terminal does.
func (st *State) DropBind(b Bind) {
	st.ClearBind(b)
	st.Terminate(b.Proxy(), DroppedFrame, false)
}

// ClearBind forgets b once its stream ended: a later cancel has no
// producer to signal.
func (st *State) ClearBind(b Bind) {
	st.mu.Lock()
	if st.bindLocked() == b {
		st.setBindLocked(nil)
	}
	st.mu.Unlock()
}

// CloseConn closes the connection of bind b, whose stream ended by a
// control message: its reader then stops.
func (st *State) CloseConn(b Bind) {
	st.mu.Lock()
	c := b.Conn()
	st.mu.Unlock()
	if c != nil {
		c.Close()
	}
}

// OpenerLost ends st with ErrOpenerLost unless a stream flows into it or a
// producer on this worker holds it. It reports whether it ended st.
func (st *State) OpenerLost() bool {
	st.mu.Lock()
	b := st.bindLocked()
	if st.endErr != nil || st.feed != nil || st.local || (b != nil && b.Conn() != nil) {
		st.mu.Unlock()
		return false
	}
	st.setBindLocked(nil)
	st.endLocked(streamerr.ErrOpenerLost)
	release := st.releasePrebindLocked()
	st.mu.Unlock()
	if release != nil {
		release() // its OpenSlot, if one ever comes, is answered UnknownSlot
	}
	if b != nil {
		b.Unpend() // its connection, if one ever comes, finds no bind
	}
	st.home.Owner.Remove(st)
	return true
}
