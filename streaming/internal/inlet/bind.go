package streaming

import (
	"net"

	"github.com/velo-go/velo/ext"
)

// The per-stream producer's bind (remoteBind, control.go) as the inlet
// keeps it: who may end the stream by a control message, when its
// connection counts as come, and when it is forgotten. Every read and
// write of st.bind is here, under mu.

// takeBindFrom detaches the remote bind for a control message from asker
// and returns it (nil when no per-stream producer is bound). A stranger
// takes nothing (ok false): only the bound producer, or the producer whose
// mux slot feeds the anchor, may end its stream.
func (st *anchorState) takeBindFrom(asker ext.WorkerID) (b *remoteBind, ok bool) {
	st.mu.Lock()
	defer st.mu.Unlock()
	b = st.bind
	if (b != nil && b.producer != asker) || (st.feed != nil && st.feed.ip.peer != asker) {
		return nil, false
	}
	st.bind = nil
	return b, true
}

// connectBind records that bind b's connection c came. It is gone when the
// consumer cancelled or closed, or a control message ended the stream,
// before it came: closing c is then how the producer hears of it.
func (st *anchorState) connectBind(b *remoteBind, c net.Conn) (gone, cancelled bool) {
	st.mu.Lock()
	defer st.mu.Unlock()
	cancelled = st.cancelled
	gone = cancelled || st.closed || b.proxy.done
	if !gone {
		b.conn = c
	}
	return gone, cancelled
}

// isAttached says whether a producer holds the anchor: one on this
// worker, or a mux slot. (A per-stream bind is checked apart: takeBindFrom.)
func (st *anchorState) isAttached() bool {
	st.mu.Lock()
	defer st.mu.Unlock()
	return st.attached
}

// dropBind ends the stream of bind b with Dropped, as a connection that
// ended without a terminal does.
func (st *anchorState) dropBind(b *remoteBind) {
	st.clearBind(b)
	st.terminate(b.proxy, droppedFrame, false)
}

// clearBind forgets b once its stream ended: a later cancel has no
// producer to signal.
func (st *anchorState) clearBind(b *remoteBind) {
	st.mu.Lock()
	if st.bind == b {
		st.bind = nil
	}
	st.mu.Unlock()
}

// closeConn closes the connection of bind b, whose stream ended by a
// control message: its reader then stops.
func (st *anchorState) closeConn(b *remoteBind) {
	st.mu.Lock()
	c := b.conn
	st.mu.Unlock()
	if c != nil {
		c.Close()
	}
}

// openerLost ends st with ErrOpenerLost unless a stream flows into it or a
// producer on this worker holds it. It reports whether it ended st.
func (st *anchorState) openerLost() bool {
	st.mu.Lock()
	b := st.bind
	if st.endErr != nil || st.feed != nil || st.local || (b != nil && b.conn != nil) {
		st.mu.Unlock()
		return false
	}
	st.bind = nil
	st.endLocked(ErrOpenerLost)
	release := st.releasePrebindLocked()
	st.mu.Unlock()
	if release != nil {
		release() // its OpenSlot, if one ever comes, is answered UnknownSlot
	}
	if b != nil {
		st.mgr.remote.unpend(b) // its connection, if one ever comes, finds no bind
	}
	st.mgr.remove(st)
	return true
}
