package streaming

// The consumer's signals to its producers, as the inlet keeps them: a stop
// and a cancel, the channels a producer waits on (made on demand), the
// first signal's cause, and the out-of-line fields few anchors use.

import (
	"io"
	"time"

	"github.com/velo-go/velo/ext"
	wire "github.com/velo-go/velo/internal/streamwire"
	"github.com/velo-go/velo/metrics"
)

// requestStop fires the stop signal, now or for a producer that attaches
// later. After a cancel it does nothing: the stream is over, and Stopped
// means a stop of a live stream only.
func (st *anchorState) requestStop() {
	st.mu.Lock()
	if st.cancelled {
		st.mu.Unlock()
		return
	}
	first := st.stopLocked()
	b, feed := st.bind, st.feed
	var remotes []*remoteBind
	var feeds []*inSlot
	if first && st.mpsc != nil {
		remotes, feeds = st.mpsc.remoteControls(), st.mpsc.remoteFeeds()
	}
	st.mu.Unlock()
	if first && b != nil {
		b.signal(streamStopHandler)
	}
	for _, rb := range remotes {
		rb.signal(streamStopHandler)
	}
	if first && feed != nil {
		feed.requestStop()
	}
	for _, f := range feeds { // MPSC producers over the mux
		f.requestStop()
	}
}

// stopLocked fires the stop signal and reports whether it was the first.
func (st *anchorState) stopLocked() bool {
	if st.stopReq {
		return false
	}
	st.stopReq = true
	if x := st.extra; x != nil && x.stopCh != nil {
		close(x.stopCh)
	}
	if !st.cancelled {
		st.closeDoneLocked()
	}
	return true
}

// closeDoneLocked closes the Done channel and ends the producers'
// contexts: the first stop or cancel, whose cause causeLocked then says.
func (st *anchorState) closeDoneLocked() {
	x := st.extra
	if x == nil {
		return
	}
	if x.doneCh != nil {
		close(x.doneCh)
	}
	why := st.causeLocked()
	for _, fn := range x.onFire {
		fn(why)
	}
	x.onFire = nil
}

// anchorExtra holds the fields of an anchor that most streams never use,
// out of line: every unattached anchor pays for anchorState, whose size
// class (192 bytes with the Anchor's decoder) the heap bound test in
// reservation_test.go holds. Each field here moved out of anchorState
// because an unwatched, unattached anchor never sets it.
type anchorExtra struct {
	stopCh   chan struct{}  // made on demand; closed by RequestStop only
	cancelCh chan struct{}  // made on demand; closed by cancel
	doneCh   chan struct{}  // made on demand; closed by the first stop or cancel
	onFire   []func(error)  // Sender.Context's cancels, run by the first stop or cancel
	opener   ext.InstanceID // the instance expected to open it (ExpectOpener); zero: none
	// prebind is the mux bind PrebindAnchor made, until an OpenSlot
	// claims it or something releases it (mux_ticket.go).
	prebind *muxBind
	// lifetime is the length of one unattached window when it is not
	// the default (lifetimeLocked); zero: the default.
	lifetime time.Duration
}

// prebindLocked is the unclaimed mux pre-bind, or nil. The caller holds mu.
func (st *anchorState) prebindLocked() *muxBind {
	if st.extra == nil {
		return nil
	}
	return st.extra.prebind
}

// setPrebindLocked sets (or, with nil, clears) the mux pre-bind. The
// caller holds mu.
func (st *anchorState) setPrebindLocked(bd *muxBind) {
	if bd == nil && st.extra == nil {
		return
	}
	st.extraLocked().prebind = bd
}

// defaultLifetime is the unattached window an anchor has without
// WithUnattachedTimeout: the Manager's, or Forever for an MPSC anchor.
func (st *anchorState) defaultLifetime() time.Duration {
	if st.mpsc != nil {
		return Forever
	}
	return st.mgr.res.UnattachedTimeout
}

// setLifetime sets the length of one unattached window, before anyone
// else sees the anchor; only a length other than the default takes room.
func (st *anchorState) setLifetime(d time.Duration) {
	if d != st.defaultLifetime() {
		st.extraLocked().lifetime = d
	}
}

// lifetimeLocked is the length of one unattached window.
func (st *anchorState) lifetimeLocked() time.Duration {
	if x := st.extra; x != nil && x.lifetime != 0 {
		return x.lifetime
	}
	return st.defaultLifetime()
}

// extraLocked returns st.extra, made if needed.
func (st *anchorState) extraLocked() *anchorExtra {
	if st.extra == nil {
		st.extra = new(anchorExtra)
	}
	return st.extra
}

// openerID is the instance named by ExpectOpener, or zero. It is set
// before the anchor is registered and never changes.
func (st *anchorState) openerID() ext.InstanceID {
	if st.extra == nil {
		return ext.InstanceID{}
	}
	return st.extra.opener
}

// watchFire runs fn with the cause at the first signal, or returns the
// cause if a signal has fired already (fn is then not kept).
func (st *anchorState) watchFire(fn func(error)) error {
	st.mu.Lock()
	defer st.mu.Unlock()
	if why := st.causeLocked(); why != nil {
		return why
	}
	x := st.extraLocked()
	x.onFire = append(x.onFire, fn)
	return nil
}

// causeLocked is why the producer's signals fired, or nil: the first of a
// stop (ErrStopRequested) and a cancel (ErrCancelled).
func (st *anchorState) causeLocked() error {
	switch {
	case st.stopReq:
		return ErrStopRequested
	case st.cancelled:
		return ErrCancelled
	}
	return nil
}

// cancel ends delivery and fires the producer's Cancelled (and Done, unless
// a stop fired it first); Stopped stays as it was. With closing, the
// anchor also leaves the registry and later terminals are discarded;
// without, the entry stays so that a producer attaching later still sees
// the cancel.
func (st *anchorState) cancel(closing bool) {
	st.mu.Lock()
	// A cancel counts when it ends a live stream: not again, and not on
	// a stream that had already ended (finalized, expired, ...).
	counted := !st.cancelled && st.endErr == nil
	first := !st.cancelled
	if first {
		st.cancelled = true
		if x := st.extra; x != nil && x.cancelCh != nil {
			close(x.cancelCh)
		}
		if !st.stopReq {
			st.closeDoneLocked()
		}
	}
	st.endLocked(ErrCancelled)
	if closing {
		st.closed = true
	}
	b, feed := st.bind, st.feed
	release := st.releasePrebindLocked() // an unclaimed bind: its OpenSlot is answered UnknownSlot
	var remotes []*remoteBind            // an MPSC anchor's producers on other workers
	var feeds []*inSlot                  // those of them over the mux
	if first && st.mpsc != nil {
		remotes, feeds = st.mpsc.remoteControls(), st.mpsc.remoteFeeds()
	}
	var conn io.Closer // the per-stream connections: closing them is the backstop
	switch {
	case b != nil && b.conn != nil:
		conn = b.conn
	case st.mpsc != nil && len(st.mpsc.remotes) > 0:
		conn = mpscConns{st.mpsc}
	}
	st.mu.Unlock()
	if release != nil {
		release()
	}
	if feed != nil && first {
		feed.consumerGone() // CloseSlot{UnknownSlot}: the producer's sends fail
	}
	for _, f := range feeds { // CloseSlot{UnknownSlot} to each
		f.consumerGone()
	}
	if counted && st.mgr.met != nil {
		st.mgr.met.Operation(metrics.StreamCancel, metrics.SchemeLocal, true, 0)
	}
	if first && b != nil {
		b.signal(wire.StreamCancelHandler)
	}
	// Each remote producer of an MPSC anchor gets its own _stream_cancel,
	// as the reference's cancel_all_senders sends: a Rust producer's
	// cancellation token fires only on that message, not on the close.
	for _, rb := range remotes {
		rb.signal(wire.StreamCancelHandler)
	}
	if conn != nil {
		conn.Close() // the backstop, if the message is lost
	}
	if closing {
		st.mgr.remove(st)
	}
}

// Kinds of producer signal: the channels of Stopped, Cancelled and Done.
type signalKind uint8

const (
	sigStop signalKind = iota
	sigCancel
	sigDone
)

// signal returns the channel of one kind, made on demand so that a stream
// nobody watches pays nothing for it.
func (st *anchorState) signal(k signalKind) <-chan struct{} {
	st.mu.Lock()
	defer st.mu.Unlock()
	var ch *chan struct{}
	var fired bool
	switch k {
	case sigStop:
		ch, fired = &st.extraLocked().stopCh, st.stopReq
	case sigCancel:
		ch, fired = &st.extraLocked().cancelCh, st.cancelled
	default:
		ch, fired = &st.extraLocked().doneCh, st.stopReq || st.cancelled
	}
	if fired {
		return closedChan
	}
	if *ch == nil {
		*ch = make(chan struct{})
	}
	return *ch
}

// cause is causeLocked under the lock.
func (st *anchorState) cause() error {
	st.mu.Lock()
	defer st.mu.Unlock()
	return st.causeLocked()
}
