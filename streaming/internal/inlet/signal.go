package inlet

// The consumer's signals to its producers, as the inlet keeps them: a stop
// and a cancel, the channels a producer waits on (made on demand), the
// first signal's cause, and the out-of-line fields few anchors use.

import (
	"io"
	"time"

	"github.com/velo-go/velo/ext"
	wire "github.com/velo-go/velo/internal/streamwire"
	"github.com/velo-go/velo/metrics"
	"github.com/velo-go/velo/streaming/internal/streamerr"
)

// RequestStop fires the stop signal, now or for a producer that attaches
// later. After a cancel it does nothing: the stream is over, and Stopped
// means a stop of a live stream only.
func (st *State) RequestStop() {
	st.mu.Lock()
	if st.cancelled {
		st.mu.Unlock()
		return
	}
	first := st.stopLocked()
	b, feed := st.bindLocked(), st.feed
	var remotes []Signaler
	var feeds []*Feed
	if first && st.mpsc != nil {
		remotes, feeds = st.mpsc.remoteControls(), st.mpsc.remoteFeeds()
	}
	st.mu.Unlock()
	if first && b != nil {
		b.Signal(wire.StreamStopHandler)
	}
	for _, rb := range remotes {
		rb.Signal(wire.StreamStopHandler)
	}
	if first && feed != nil {
		feed.slot.RequestStop()
	}
	for _, f := range feeds { // MPSC producers over the mux
		f.slot.RequestStop()
	}
}

// stopLocked fires the stop signal and reports whether it was the first.
func (st *State) stopLocked() bool {
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
func (st *State) closeDoneLocked() {
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

// extra holds the fields of an anchor that most streams never use,
// out of line: every unattached anchor pays for State, whose size
// class (192 bytes with the Anchor's decoder) streaming's
// TestAnchorFitsItsSizeClass holds. Each field here moved out of State
// because an unwatched, unattached anchor never sets it.
type extra struct {
	stopCh   chan struct{}  // made on demand; closed by RequestStop only
	cancelCh chan struct{}  // made on demand; closed by cancel
	doneCh   chan struct{}  // made on demand; closed by the first stop or cancel
	onFire   []func(error)  // Sender.Context's cancels, run by the first stop or cancel
	opener   ext.InstanceID // the instance expected to open it (ExpectOpener); zero: none
	// prebind is the mux bind PrebindAnchor made, until an OpenSlot
	// claims it or something releases it (streaming's mux_ticket.go).
	prebind Prebind
	// bind is the per-stream producer bound by _anchor_attach (bindLocked).
	bind Bind
	// lifetime is the length of one unattached window when it is not
	// the default (lifetimeLocked); zero: the default.
	lifetime time.Duration
}

// bindLocked is the per-stream producer bound by _anchor_attach, or nil:
// a stop or cancel is sent to it as a message, and its connection is
// closed as the backstop. It lives in extra: most anchors never have one.
// The caller holds mu.
func (st *State) bindLocked() Bind {
	if st.extra == nil {
		return nil
	}
	return st.extra.bind
}

// setBindLocked sets (or, with nil, clears) the bind. The caller holds mu.
func (st *State) setBindLocked(b Bind) {
	if b == nil && st.extra == nil {
		return
	}
	st.extraLocked().bind = b
}

// prebindLocked is the unclaimed mux pre-bind, or nil. The caller holds mu.
func (st *State) prebindLocked() Prebind {
	if st.extra == nil {
		return nil
	}
	return st.extra.prebind
}

// setPrebindLocked sets (or, with nil, clears) the mux pre-bind. The
// caller holds mu.
func (st *State) setPrebindLocked(bd Prebind) {
	if bd == nil && st.extra == nil {
		return
	}
	st.extraLocked().prebind = bd
}

// defaultLifetime is the unattached window an anchor has without
// WithUnattachedTimeout: the Manager's, or Forever for an MPSC anchor.
func (st *State) defaultLifetime() time.Duration {
	if st.mpsc != nil {
		return Forever
	}
	return st.home.Lifetime
}

// setLifetime sets the length of one unattached window, before anyone
// else sees the anchor; only a length other than the default takes room.
func (st *State) setLifetime(d time.Duration) {
	if d != st.defaultLifetime() {
		st.extraLocked().lifetime = d
	}
}

// lifetimeLocked is the length of one unattached window.
func (st *State) lifetimeLocked() time.Duration {
	if x := st.extra; x != nil && x.lifetime != 0 {
		return x.lifetime
	}
	return st.defaultLifetime()
}

// extraLocked returns st.extra, made if needed.
func (st *State) extraLocked() *extra {
	if st.extra == nil {
		st.extra = new(extra)
	}
	return st.extra
}

// Opener is the instance named by ExpectOpener, or zero. It is set
// before the anchor is registered and never changes.
func (st *State) Opener() ext.InstanceID {
	if st.extra == nil {
		return ext.InstanceID{}
	}
	return st.extra.opener
}

// WatchFire runs fn with the cause at the first signal, or returns the
// cause if a signal has fired already (fn is then not kept).
func (st *State) WatchFire(fn func(error)) error {
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
func (st *State) causeLocked() error {
	switch {
	case st.stopReq:
		return streamerr.ErrStopRequested
	case st.cancelled:
		return streamerr.ErrCancelled
	}
	return nil
}

// Cancel ends delivery and fires the producer's Cancelled (and Done, unless
// a stop fired it first); Stopped stays as it was. With closing, the
// anchor also leaves the registry and later terminals are discarded;
// without, the entry stays so that a producer attaching later still sees
// the cancel.
func (st *State) Cancel(closing bool) {
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
	st.endLocked(streamerr.ErrCancelled)
	if closing {
		st.closed = true
	}
	b, feed := st.bindLocked(), st.feed
	release := st.releasePrebindLocked() // an unclaimed bind: its OpenSlot is answered UnknownSlot
	var remotes []Signaler               // an MPSC anchor's producers on other workers
	var feeds []*Feed                    // those of them over the mux
	if first && st.mpsc != nil {
		remotes, feeds = st.mpsc.remoteControls(), st.mpsc.remoteFeeds()
	}
	var conn io.Closer // the per-stream connections: closing them is the backstop
	switch {
	case b != nil && b.Conn() != nil:
		conn = b.Conn()
	case st.mpsc != nil && len(st.mpsc.remotes) > 0:
		conn = mpscConns{st.mpsc}
	}
	st.mu.Unlock()
	if release != nil {
		release()
	}
	if feed != nil && first {
		feed.slot.ConsumerGone() // CloseSlot{UnknownSlot}: the producer's sends fail
	}
	for _, f := range feeds { // CloseSlot{UnknownSlot} to each
		f.slot.ConsumerGone()
	}
	if counted && st.home.Metrics != nil {
		st.home.Metrics.Operation(metrics.StreamCancel, metrics.SchemeLocal, true, 0)
	}
	if first && b != nil {
		b.Signal(wire.StreamCancelHandler)
	}
	// Each remote producer of an MPSC anchor gets its own _stream_cancel,
	// as the reference's cancel_all_senders sends: a Rust producer's
	// cancellation token fires only on that message, not on the close.
	for _, rb := range remotes {
		rb.Signal(wire.StreamCancelHandler)
	}
	if conn != nil {
		conn.Close() // the backstop, if the message is lost
	}
	if closing {
		st.home.Owner.Remove(st)
	}
}

// SignalKind is a kind of producer signal: the channels of Stopped,
// Cancelled and Done.
type SignalKind uint8

const (
	SigStop SignalKind = iota
	SigCancel
	SigDone
)

// Signal returns the channel of one kind, made on demand so that a stream
// nobody watches pays nothing for it.
func (st *State) Signal(k SignalKind) <-chan struct{} {
	st.mu.Lock()
	defer st.mu.Unlock()
	var ch *chan struct{}
	var fired bool
	switch k {
	case SigStop:
		ch, fired = &st.extraLocked().stopCh, st.stopReq
	case SigCancel:
		ch, fired = &st.extraLocked().cancelCh, st.cancelled
	default:
		ch, fired = &st.extraLocked().doneCh, st.stopReq || st.cancelled
	}
	if fired {
		return ClosedChan
	}
	if *ch == nil {
		*ch = make(chan struct{})
	}
	return *ch
}

// Cause is causeLocked under the lock.
func (st *State) Cause() error {
	st.mu.Lock()
	defer st.mu.Unlock()
	return st.causeLocked()
}
