package streamsock

import (
	"net"

	"github.com/velo-go/velo/internal/frame"
)

// Leader and followers. A reader offers its role to the node's sink with
// each read's last batch (ext.Handoff). A sink that runs a request on the
// reader goroutine, rather than wake a worker for it, first hands the
// connection to another goroutine: a parked follower, or a new one. So the
// request starts with no goroutine woken in front of it, and a handler
// that blocks holds up nothing but its own goroutine: the connection,
// with the replies it carries, is read on by the follower. The goroutine
// that ran the request then parks as a follower itself, up to
// maxFollowers per transport; the others end.

// maxFollowers bounds the readers parked per transport.
const maxFollowers = 16

// connRead is what reading one accepted connection needs, whichever
// goroutine leads it.
type connRead struct {
	conn net.Conn
	r    *frame.Reader
}

// reader is one goroutine's part in reading: the connection it leads (st,
// nil once handed on) and its own batch buffers, since the batch it handed
// on with the connection is still the sink's.
type reader struct {
	t  *Transport
	st *connRead
	in inbound
}

// lead reads rd.st until the connection ends, which it then tears down
// (false), or until the sink took the role (true).
func (rd *reader) lead() bool {
	if rd.readLoop() {
		return true
	}
	st, t := rd.st, rd.t
	rd.st = nil
	t.byConn.Delete(st.r.Conn)
	t.adapter.ConnClosed(st.r.Conn) // after the last frame was handed over
	st.r.Close()
	t.connEnded(st.conn)
	return false
}

// Handoff gives the connection rd leads to a follower. It runs on rd's
// goroutine, within the sink; rd's read loop stops when the sink returns.
func (rd *reader) Handoff() bool {
	t, st := rd.t, rd.st
	if st == nil || t.closing.Load() {
		return false
	}
	select {
	case t.followers <- st:
	default:
		go t.newFollower(st)
	}
	rd.st = nil
	t.handoffs.Add(1)
	return true
}

// newFollower leads st on a goroutine of its own. wg counts the
// connection, not this goroutine: a handler that blocks on it after it
// handed st on holds the transport's close no more than a worker would.
func (t *Transport) newFollower(st *connRead) {
	rd := &reader{t: t, st: st}
	if rd.lead() {
		rd.follow()
	}
}

// follow waits for a connection to lead and leads it, until a connection
// it led ends, the transport stops, or enough followers wait already.
func (rd *reader) follow() {
	t := rd.t
	for {
		if t.parked.Add(1) > maxFollowers {
			t.parked.Add(-1)
			return
		}
		select {
		case st := <-t.followers:
			t.parked.Add(-1)
			rd.st = st
			if !rd.lead() {
				return
			}
		case <-t.stop:
			t.parked.Add(-1)
			return
		}
	}
}
