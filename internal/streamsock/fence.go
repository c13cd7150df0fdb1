package streamsock

import (
	"bytes"
	"net"
	"time"

	"github.com/velo-go/velo/ext"
	"github.com/velo-go/velo/internal/frame"
	"github.com/velo-go/velo/internal/msgwire"
)

// The fence on a new connection to a node that holds unproven connections.
//
// A Go node holds the requests of a new inbound connection until the
// connection proves which peer it speaks for (one round trip through the
// claimed peer's own address), and it holds at most 512 KiB and 2,048
// requests. Past that it refuses them, and a fire-and-forget request
// refused there is lost. A dialer writing a burst (the mux's batches on a
// fresh lane) can outrun the round trip, so each new connection to such a
// node is fenced: its lane admits at most fenceBudget of requests,
// counting each at its size plus fencePerFrame, and later sends wait in the lane's
// admission gate, in order, as they would for a full channel. The
// identity proof (an Urgent frame) passes the fence. Once the receiver
// has bound the connection it writes connConfirmed back on it, and the
// lane's echo reader lifts the fence.
//
// The budget is half the receiver's hold in bytes, and fencePerFrame
// keeps the count of frames under its 2,048 (256 KiB / 192 B is 1,365),
// so what the dialer writes before the proof always fits what the
// receiver holds.
const (
	fenceBudget   = 256 << 10
	fencePerFrame = 192
)

// fenceTimeout lifts a fence that no confirmation lifted: a receiver that
// does not know this node yet trusts the connection as it claims and
// never confirms it. It is the receiver's own limit: by then it has
// refused what it held of an unproven connection anyway.
var fenceTimeout = msgwire.ProofTimeout

// connConfirmed is what a receiver writes back on a connection once it is
// bound: an Ack with no header (a real Ack always has one) and a fixed
// payload. Only a Go dialer, one that proved itself, is sent it.
var (
	confirmPayload = []byte("velo-conn-confirmed")
	connConfirmed  = frame.Append(nil, ext.Frame{Type: ext.Ack, Payload: confirmPayload})
)

// isConfirmation reports whether f, read back on a dialed connection, is
// the receiver's confirmation.
func isConfirmation(f ext.Frame) bool {
	return f.Type == ext.Ack && len(f.Header) == 0 && bytes.Equal(f.Payload, confirmPayload)
}

// fences reports whether connections to a peer with this address are
// fenced: its address carries the mark of a node that proves connections.
func fences(addr ext.WorkerAddress) bool {
	_, ok := addr[msgwire.ProofKey]
	return ok
}

// fenceCost is what a frame counts against the fence: the receiver holds
// requests only, so replies, acks and events pass.
func fenceCost(f outFrame, units int) int { return fenceCostOf(f.Type, units) }

// fenceCostOf is fenceCost for a frame of type typ.
func fenceCostOf(typ ext.MessageType, units int) int {
	if typ != ext.Message {
		return 0
	}
	return units + fencePerFrame
}

// raiseFence fences a new lane and arms the timer that lifts it if no
// confirmation comes.
func (l *lane) raiseFence() {
	l.gate.Fence(fenceBudget, fenceCost)
	l.fenceTimer = time.AfterFunc(fenceTimeout, l.fenceExpired)
}

// liftFence lifts the lane's fence on the receiver's confirmation.
func (l *lane) liftFence() {
	if l.fenceTimer != nil {
		l.fenceTimer.Stop()
	}
	l.lift()
}

// lift lifts the fence. What it admits may find the writer idle and be
// claimed for an inline write (Accept), as a send would: with no sender
// here to write it, this goroutine does.
func (l *lane) lift() {
	l.gate.Lift()
	if l.claimed.Load() {
		l.flushInline()
	}
}

// fenceExpired lifts a fence the receiver never confirmed. When sends
// waited behind it, the receiver may still hold the connection, so the
// lift is worth a warning.
func (l *lane) fenceExpired() {
	waiting := l.gate.Pending()
	if waiting > 0 && l.gate.Fenced() {
		// Counted before the lift lets the sends go, so whoever sees them
		// arrive also sees the count.
		l.t.fenceTimeouts.Add(1)
		l.t.log.Warn("velo: a new connection was not confirmed by its receiver in time; sending what waited for it",
			"peer", l.peer.id, "lane", l.idx, "waiting", waiting, "after", fenceTimeout)
	}
	l.lift()
}

// ConfirmConn tells the dialer of inbound connection id that this node
// bound it, so the dialer lifts its fence (ext.ConnConfirmer). It is a
// no-op for a connection this transport does not have.
//
// The write goes on the connection's return direction, which carries only
// drain echoes and the goodbye: it is a few bytes on a socket that is
// almost never full, and Go serializes it with the reader's echo writes.
func (t *Transport) ConfirmConn(id ext.ConnID) {
	v, ok := t.byConn.Load(id)
	if !ok || t.closing.Load() {
		return
	}
	conn := v.(net.Conn)
	if _, err := conn.Write(connConfirmed); err != nil {
		t.log.Debug("velo: connection confirmation not sent", "remote", conn.RemoteAddr().String(), "err", err)
	}
}
