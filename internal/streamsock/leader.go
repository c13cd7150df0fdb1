package streamsock

import (
	"net"
	"time"

	"github.com/velo-go/velo/ext"
	"github.com/velo-go/velo/internal/frame"
)

// Leader and followers. A reader offers its role to the node's sink with
// each read's last batch (ext.Handoff). A sink that runs a request on the
// reader goroutine, rather than wake a worker for it, asks first
// (Handoff): the reader keeps the connection while the request runs, and
// if it runs for longer than handoffAfter the transport's watchdog
// (watch.go) gives the connection to another goroutine: a parked
// follower, or a new one. So the request starts with no goroutine woken
// in front of it, a short one is answered with none woken at all (the
// reader reads on once it returns), and a handler that blocks holds up
// the connection, with the replies it carries, for the bound plus the
// timer's lateness (watch.go), unless the sink hands it on at once
// (HandOnNow). A reader whose connection was handed on parks as a follower
// itself once its request ends, up to maxFollowers per transport; the
// others end.

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
	// inRun: the sink runs a request on this goroutine (Handoff said
	// yes); only this goroutine reads or writes it.
	inRun bool
	// The watchdog's view of the run, under its lock: the connection
	// while it is still this reader's, when the run began, and the
	// reader's index in the watchdog's runs.
	watched *connRead
	since   time.Duration
	slot    int
	// onHandOn is the sink's listener for the run (HandoffNotify): told
	// when the watchdog hands the connection on while the run goes on.
	onHandOn ext.HandOnListener
	// waits are what the sink deferred to the end of the read
	// (ext.WaitDeferrer): made once everything read is handed on.
	waits []ext.Waiter
}

// keepRole is rd as the Handoff of a batch after which rd must go on for
// the connection itself: frames of the same read follow it, or waits
// deferred by the sink do. It offers no hand-off, but takes waits.
type keepRole reader

func (k *keepRole) Handoff() bool { return false }

func (k *keepRole) DeferWait(w ext.Waiter) { (*reader)(k).DeferWait(w) }

// DeferWait keeps w for the end of the read (ext.WaitDeferrer). A read has
// batches for a handful of handlers at most, so the look for w is short.
func (rd *reader) DeferWait(w ext.Waiter) {
	for _, x := range rd.waits {
		if x == w {
			return
		}
	}
	rd.waits = append(rd.waits, w)
}

// awaitSinks makes the waits the sink deferred during the read, which is
// handed on: the sink's queues go down while the socket fills and TCP
// holds back the sender.
func (rd *reader) awaitSinks() {
	for i, w := range rd.waits {
		w.Wait()
		rd.waits[i] = nil
	}
	rd.waits = rd.waits[:0]
}

// dropWaits forgets the deferred waits of a read after which rd reads the
// connection no more.
func (rd *reader) dropWaits() {
	clear(rd.waits)
	rd.waits = rd.waits[:0]
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

// Handoff lets the sink run a request on rd's goroutine, within the sink:
// the watchdog hands the connection on if the run lasts (watch.go); rd
// learns which when the sink returns (settle). False while the transport
// closes: the sink must not block then.
func (rd *reader) Handoff() bool { return rd.handoff(nil) }

// HandoffNotify is Handoff for a sink that runs several requests on rd,
// one after the other: l hears if the connection goes on while the run
// does (ext.HandoffNotifier), so that the requests not yet started can
// have a goroutine of their own.
func (rd *reader) HandoffNotify(l ext.HandOnListener) bool { return rd.handoff(l) }

func (rd *reader) handoff(l ext.HandOnListener) bool {
	t, st := rd.t, rd.st
	if st == nil || rd.inRun {
		return false
	}
	rd.inRun = true
	if t.testHandoffHook != nil {
		t.testHandoffHook()
	}
	t.watch.begin(rd, st, l)
	// Closing is looked at after the run is registered, not before: a
	// shutdown whose hand-off of every watched run (handAllOn) came before
	// begin is seen here, and one that came after it handed this run on.
	// Looked at first, a shutdown landing in between would leave the
	// connection unread for the bound while the handler blocks.
	if t.closing.Load() && t.watch.end(rd) {
		rd.inRun = false
		return false
	}
	return true
}

// HandOnNow hands rd's connection on now if a run holds it still (the
// sink learned its request will wait): see ext.HandOnNow. Any goroutine
// may call it; the watchdog's lock decides, as for a fire.
func (rd *reader) HandOnNow() { rd.t.watch.handOn(rd) }

// settle ends the run the sink made on rd, if any, and reports whether
// rd still leads its connection.
func (rd *reader) settle() bool {
	if !rd.inRun {
		return true
	}
	rd.inRun = false
	if rd.t.watch.end(rd) {
		return true
	}
	rd.st = nil // a follower reads it now: nothing of it is ours
	return false
}

// passOn gives st to a parked follower, or to a new one.
func (t *Transport) passOn(st *connRead) {
	select {
	case t.followers <- st:
	default:
		go t.newFollower(st)
	}
	t.handoffs.Add(1)
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

// The reader offers its role with ext's interfaces.
var (
	_ ext.HandOnNow       = (*reader)(nil)
	_ ext.HandoffNotifier = (*reader)(nil)
)
