// Package inlet is the inlet of a stream's anchor: its ring of frames, the
// lock that guards it and the anchor's whole lifecycle (claims, signals,
// the unattached deadline, the mux feed, the producers of an MPSC anchor).
// State is the one owner of that lock and that state; the rest of package
// streaming, the mux and the per-stream path reach it through State's
// methods, never its fields.
//
// What the inlet needs from outside it reaches through small interfaces
// defined here: Owner (the Manager's registry and counters), Bind (a
// per-stream producer's bind), Slot (a mux slot that feeds the inlet),
// Prebind (an unclaimed mux pre-bind) and Signaler (where an MPSC
// producer's stop goes). None of them is called per frame: the consumer's
// pop, a producer's push and the wakes call no interface, and a mux feed
// calls Slot.MarkDirty once per credit return, not per record.
package inlet

import (
	"context"
	"errors"
	"fmt"
	"io"
	"sync"

	wire "github.com/velo-go/velo/internal/streamwire"
	"github.com/velo-go/velo/metrics"
	"github.com/velo-go/velo/streaming/internal/retire"
	"github.com/velo-go/velo/streaming/internal/streamerr"
)

// ClosedChan is returned for a signal that has already fired, here and
// by the mux's slots.
var ClosedChan = func() chan struct{} { c := make(chan struct{}); close(c); return c }()

// Frames without a value, shared by every stream; the consumer only reads
// them. The inlet tells a Detached apart by its identity (isDetached), so
// producers hand these very slices in.
var (
	FinalizedFrame = []byte(wire.FinalizedFrame)
	DetachedFrame  = []byte(wire.DetachedFrame)
	DroppedFrame   = []byte(wire.DroppedFrame)
)

// State is one anchor's inlet and lifecycle, shared by the Anchor, its
// Controller, the Manager's registry and the attached producer. One mutex
// guards all of it. Nothing here owns a goroutine: a party that must wait
// makes a channel under the lock, and the party that changes the state
// closes it (or, for consumers, sends it a token: wakeData).
//
// Every unattached anchor is one State (with its decoder), so its size is
// held to a size class (streaming's TestAnchorFitsItsSizeClass): a field
// that few anchors use belongs in extra.
type State struct {
	home    *Home
	handle  wire.AnchorHandle
	capLim  int32
	waiters int32 // consumers waiting on dataWait (wakeData)
	// fastWaiting: a consumer waits on dataWait alone, without a select
	// on its context's Done channel; the watch (watchDone, below) wakes
	// it if that context ends. selects and watchFired belong to the
	// watch; they sit here, where the struct has room for them.
	fastWaiting bool
	watchFired  bool
	selects     uint8
	watchAt     int32 // this anchor's index in watch.members (watch.go), under the Home's watches.mu

	mu        sync.Mutex
	q         ring
	dataWait  chan struct{} // a consumer waits for a frame or an end
	spaceWait chan struct{} // senders wait for room or a state change
	attached  bool
	local     bool // the attached producer is on this worker (ClaimLocal)
	stopReq   bool
	cancelled bool   // the consumer cancelled (Controller.Cancel or Close)
	closed    bool   // the consumer closed the anchor: terminals are discarded
	armed     bool   // has an unattached deadline (deadline.go); packed with the bools
	extra     *extra // made on demand: what few anchors use
	endErr    error  // the error that ended the stream, returned again

	// The unattached deadline (deadline.go), set while armed: in
	// nanoseconds since Home.Base. The length of one unattached window
	// is lifetimeLocked.
	deadline int64

	mpsc *MPSC // set for an MPSC anchor (mpsc.go)

	// feed is the mux slot that fills the inlet, while one does
	// (feed.go): each frame the consumer takes returns its credit. It is
	// a concrete pointer, not a Slot, so that the take costs no
	// interface call.
	feed *Feed
	// watchDone is the Done channel of the lone consumer's context
	// (selects, above, counts the waits that selected on it so far). Once
	// watched (watch set), its end wakes a fast waiter (waitLocked);
	// watchFired says it ended. Contexts are told apart by their Done
	// channels: a context type need not be comparable.
	watchDone <-chan struct{}
	watch     *ctxWatch // the Home's watch of that context (watch.go), once joined
}

// wakeData wakes one waiting consumer. The caller holds mu. The channel holds one token and
// lives as long as the anchor: a consumer that waits once per token (a
// stream slower than its producer's passes) used to make and close a
// channel per wait. A consumer that wakes to more work, or to the end,
// passes the token on to the next waiter (passOnLocked).
func (st *State) wakeData() {
	if st.waiters > 0 {
		select {
		case st.dataWait <- struct{}{}:
		default:
		}
	}
}

// wakeChanLocked is the channel to send a consumer's wake on, once the
// caller has released mu, or nil when no consumer waits. A token sent
// after the unlock is never lost: a consumer that starts to wait later
// finds the frames first. One that finds it with nothing to take looks
// again and waits again.
func (st *State) wakeChanLocked() chan struct{} {
	if st.waiters > 0 {
		return st.dataWait
	}
	return nil
}

// waitDataLocked returns the channel a consumer waits on for a frame or
// the end, and counts it as waiting until doneWaitingLocked.
func (st *State) waitDataLocked() chan struct{} {
	if st.dataWait == nil {
		st.dataWait = make(chan struct{}, 1)
	}
	st.waiters++
	return st.dataWait
}

func (st *State) doneWaitingLocked() { st.waiters-- }

// Depth is the number of frames the inlet holds.
func (st *State) Depth() int {
	st.mu.Lock()
	defer st.mu.Unlock()
	return st.q.n
}

// waitLocked waits for a frame or the end, or for ctx to end (its error
// is returned). The caller holds mu; it is released while waiting and
// held again on return. A wake may find nothing: the caller checks again.
//
// The usual consumer is alone and passes the same context every time. It
// waits on dataWait with a plain receive once its context is watched: a
// select that also watches ctx.Done costs twice as much, and every
// consumer under one context shares (and contends for) that Done
// channel's lock. The watch (watch.go) is one context.AfterFunc per
// context and Home, shared by the anchors that wait under that context: a
// consumer joins it at its first wait once two anchors have waited under
// the context, and a stream with a context of its own makes its watch at
// its third wait (an AfterFunc costs about two selects, so such a stream
// that waits once or twice never pays it). A second consumer waiting at
// the same time selects.
func (st *State) waitLocked(ctx context.Context) error {
	w, done, fast, err := st.beginWaitLocked(ctx)
	if w == nil {
		return err
	}
	st.mu.Unlock()
	if done == nil {
		<-w
	} else {
		SelectWait(w, done)
	}
	st.mu.Lock()
	return st.endWaitLocked(ctx, fast)
}

// beginWaitLocked starts a consumer's wait (waitLocked): it returns the
// channel to wait on, and done, ctx's Done channel, when the wait must
// also select on it (nil for the fast wait and for a context that never
// ends). fast says it is the fast wait: endWaitLocked needs it. When ctx
// has ended already there is no wait: w is nil and err is ctx's. The
// caller holds mu and releases it for the wait.
func (st *State) beginWaitLocked(ctx context.Context) (w, done <-chan struct{}, fast bool, err error) {
	if err := ctx.Err(); err != nil {
		return nil, nil, false, err
	}
	done = ctx.Done()
	if st.fastWaiting && st.watchFired {
		// This consumer took the wake that the fast waiter's ended
		// context sent: hand it on.
		st.wakeData()
	}
	w = st.waitDataLocked()
	fast = done != nil && st.waiters == 1 && st.watchingLocked(ctx, done)
	if fast {
		st.fastWaiting = true
		done = nil
	}
	return w, done, fast, nil
}

// SelectWait waits for a wake on w or for done to close. It is a frame
// of its own so that the select's cases do not sit in the frame of every
// consumer's fast wait, which parks on w alone.
//
//go:noinline
func SelectWait(w, done <-chan struct{}) {
	select {
	case <-w:
	case <-done:
	}
}

// endWaitLocked ends a wait that beginWaitLocked started, once the caller
// holds mu again: ctx's error when it ended meanwhile.
func (st *State) endWaitLocked(ctx context.Context, fast bool) error {
	st.doneWaitingLocked()
	if fast {
		st.fastWaiting = false
	}
	if err := ctx.Err(); err != nil {
		// The token this waiter took may have been meant for another: a
		// frame's, or the wake of a fast waiter whose own context ended
		// (its watch sends one token only). Hand it on; a waiter woken
		// for nothing looks again and waits again.
		if st.waiters > 0 {
			st.wakeData()
		}
		return err
	}
	st.home.wakes.Add(1)
	return nil
}

// watchAfterSelects is how many waits of the lone consumer select on the
// same context before it is watched, when no other anchor of the Home
// shares that context (watch.go).
const watchAfterSelects = 2

// watchingLocked reports whether the lone consumer's context ctx (whose
// Done channel is done) is watched, joining or making the Home's watch of
// it when one is due (watchLocked).
func (st *State) watchingLocked(ctx context.Context, done <-chan struct{}) bool {
	if st.watchDone != done {
		st.unwatchLocked()
		st.watchDone = done
	}
	return st.watch != nil || st.watchLocked(ctx, done)
}

// unwatchLocked takes the anchor off its consumer's context's watch, so
// that a long-lived context does not keep ended anchors reachable.
func (st *State) unwatchLocked() {
	if st.watch != nil {
		st.leaveWatchLocked()
	}
	st.watch, st.watchDone, st.watchFired, st.selects = nil, nil, false, 0
}

// passOnLocked wakes another waiting consumer when there is more for it:
// frames left after this one, or the end.
func (st *State) passOnLocked() {
	if st.waiters > 0 && (st.q.n > 0 || st.endErr != nil) {
		st.wakeData()
	}
}

// wakeSpace closes the channel of the senders waiting for room. The
// caller holds mu.
func (st *State) wakeSpace() {
	if st.spaceWait != nil {
		close(st.spaceWait)
		st.spaceWait = nil
	}
}

// Push puts an item or soft-error frame into the inlet for sender s,
// waiting while the inlet is full. A cancel, the end of s, or ctx wakes it.
func (st *State) Push(ctx context.Context, s *Sender, frame []byte) error {
	return st.pushTagged(ctx, s, frame, nil, 0)
}

// pushTagged is push for an MPSC anchor too: ids, when set, gets id in step
// with the frame, so the consumer knows which producer sent it.
func (st *State) pushTagged(ctx context.Context, s *Sender, frame []byte, ids *idRing, id SenderID) error {
	waited := false // counted once per send, however long it waits
	st.mu.Lock()
	for {
		switch {
		case s.done:
			st.mu.Unlock()
			return streamerr.ErrSenderClosed
		case st.cancelled || st.endErr != nil:
			// Cancelled, or ended on the consumer's side (an item that
			// did not decode): nobody will read what comes next.
			st.mu.Unlock()
			return streamerr.ErrCancelled
		case st.q.n < int(st.capLim):
			st.q.push(frame)
			if ids != nil {
				ids.push(id)
			}
			st.wakeData()
			st.mu.Unlock()
			return nil
		}
		if !waited {
			waited = true
			st.countWait(s)
		}
		if st.spaceWait == nil {
			st.spaceWait = make(chan struct{})
		}
		w := st.spaceWait
		st.mu.Unlock()
		select {
		case <-w:
		case <-ctx.Done():
			return ctx.Err()
		}
		st.mu.Lock()
	}
}

// countWait counts a push that found the inlet full. The owner's reader of
// a per-stream connection is not a producer: its waits are the first step
// of the saturation cascade, and the producer counts its own on its node.
func (st *State) countWait(s *Sender) {
	switch met := st.home.Metrics; {
	case met == nil:
	case s.pump:
		met.ReaderPumpBackpressure()
	default:
		met.ProducerBackpressure(metrics.SchemeLocal)
	}
}

// Terminate ends sender s with a terminal frame. It never waits: the
// terminal goes into the inlet past its capacity, behind every frame
// already there. It returns the retirement of the stream's output.
func (st *State) Terminate(s *Sender, frame []byte, detach bool) (retire.Outcome, error) {
	st.mu.Lock()
	if s.done {
		st.mu.Unlock()
		return 0, streamerr.ErrSenderClosed
	}
	s.done = true
	out, err := retire.Sent, error(nil)
	if st.closed {
		// The consumer closed its anchor: the terminal has no inlet to
		// enter (the book's same-worker Discarded).
		out, err = retire.Discarded, streamerr.ErrCancelled
	} else if st.endErr == nil && !(detach && st.q.n > 0 && isDetached(st.q.last())) {
		// Terminals go past the capacity, so this is what bounds them: a
		// stream that ended on the consumer's side takes none (nobody
		// reads them), and Detached frames in a row collapse into one
		// (the consumer skips them), so that attach/detach cycles with
		// no reader cannot grow the inlet. Both still count as handed
		// on: the anchor is open.
		st.q.push(frame)
		st.wakeData()
	}
	if detach {
		st.attached, st.local = false, false
		st.armLocked() // a new unattached window (the book: detach resumes the timer)
	}
	st.wakeSpace() // a Send of s that waits returns ErrSenderClosed
	s.SettleLocked(out)
	st.mu.Unlock()
	return out, err
}

// Pop takes the next frame the consumer must see: an item or a soft error
// (Kind Item or SenderError), or an error that ends the stream. It skips
// heartbeats and Detached (the anchor waits for the next producer) and
// turns terminals into errors: io.EOF for Finalized.
func (st *State) Pop(ctx context.Context) (wire.Frame, error) {
	st.mu.Lock()
	if err := st.awaitLocked(ctx); err != nil {
		st.mu.Unlock()
		return wire.Frame{}, err
	}
	return st.popLocked(ctx)
}

// PopBytes is Pop for a consumer of byte items (NextBytes, which runs
// this loop in its own frame): a binary item comes back as its payload,
// aliasing its frame. A soft error comes back as a *SenderError, and an
// item that is not a binary ends the stream with an *ItemError.
func (st *State) PopBytes(ctx context.Context) ([]byte, error) {
	p, w, done, fast, err := st.PopBytesOrWait(ctx)
	for w != nil {
		if done == nil {
			<-w
		} else {
			SelectWait(w, done)
		}
		p, w, done, fast, err = st.PopBytesAfterWait(ctx, fast)
	}
	if errors.Is(err, ErrFinalized) {
		err = st.ForgetFinalized()
	}
	return p, err
}

// PopBytesOrWait is PopBytes up to its wait: it takes the next frame, or,
// when the inlet holds none and the stream has not ended, starts a wait
// (beginWaitLocked) that the caller makes in its own frame: on w alone
// when done is nil, else with SelectWait; then it calls PopBytesAfterWait
// with fast. With w nil, p and err are the outcome; ErrFinalized stands
// for io.EOF and asks for ForgetFinalized.
//
// The wait is the caller's so that a consumer parked for its next frame,
// where most of a busy anchor host's goroutines sit, has the library's
// frames between it and the runtime's receive down to NextBytes's: every
// GC cycle unwinds and scans each of their stacks, and the frames of a
// wait under Await and waitLocked (and a select's cases in them) pushed a
// consumer of a few frames of its own past its first 2 KiB of stack, so
// that each grew its stack at its first wait. TestParkedConsumerFrames and
// TestParkedConsumerStack count both.
func (st *State) PopBytesOrWait(ctx context.Context) (p []byte, w, done <-chan struct{}, fast bool, err error) {
	st.mu.Lock()
	return st.popBytesOrWaitLocked(ctx)
}

// PopBytesAfterWait ends the wait that PopBytesOrWait (or an earlier
// PopBytesAfterWait) started, then goes on as PopBytesOrWait does: the
// wake may find nothing, and a new wait starts.
func (st *State) PopBytesAfterWait(ctx context.Context, fast bool) (p []byte, w, done <-chan struct{}, fast2 bool, err error) {
	st.mu.Lock()
	if err := st.endWaitLocked(ctx, fast); err != nil {
		st.mu.Unlock()
		return nil, nil, nil, false, err
	}
	return st.popBytesOrWaitLocked(ctx)
}

// popBytesOrWaitLocked is PopBytesOrWait from the caller's lock, which it
// releases.
func (st *State) popBytesOrWaitLocked(ctx context.Context) (p []byte, w, done <-chan struct{}, fast bool, err error) {
	for {
		if st.q.n == 0 && st.endErr == nil {
			w, done, fast, err = st.beginWaitLocked(ctx)
			st.mu.Unlock()
			return nil, w, done, fast, err
		}
		b, err := st.takeNowLocked()
		if err != nil {
			st.mu.Unlock()
			return nil, nil, nil, false, err
		}
		if p, ok := wire.BytesItemPayload(b); ok {
			st.mu.Unlock()
			return p, nil, nil, false, nil
		}
		if string(b) == wire.FinalizedFrame {
			st.endLocked(io.EOF)
			st.mu.Unlock()
			return nil, nil, nil, false, ErrFinalized
		}
		if p, done, err := st.readBytesLocked(b); done {
			return p, nil, nil, false, err
		}
	}
}

// ErrFinalized is what PopBytesOrWait and PopBytesAfterWait return, in
// place of io.EOF, for a stream they have just ended at its Finalized
// terminal: the caller then calls ForgetFinalized, which takes the anchor
// out of the registry and returns io.EOF. The usual end is read so,
// without a decode and with the registry's removal in the caller's frame:
// the frames of readBytesLocked, readLocked and the decoder, or of the
// removal under popBytesOrWaitLocked, were the deepest a consumer's stack
// went, and pushed a consumer of a few frames of its own past its first
// 2 KiB of stack at the end of every stream.
var ErrFinalized = errors.New("inlet: finalized, not yet forgotten")

// ForgetFinalized takes a stream that ended with ErrFinalized out of the
// registry, as readBytesLocked does at other ends, and returns the end
// the consumer sees, io.EOF.
func (st *State) ForgetFinalized() error {
	st.home.Owner.Remove(st)
	return io.EOF
}

// errNotBinary is the end of a byte stream that carried another item.
var errNotBinary = fmt.Errorf("%w: the item is not a MessagePack binary", wire.ErrMalformed)

// readBytesLocked reads for popBytesOrWaitLocked a frame that is not a token's: a
// binary of another width, a soft error, a frame to skip (done false: mu
// is still held) or the end of the stream. Otherwise it releases mu.
func (st *State) readBytesLocked(b []byte) (p []byte, done bool, err error) {
	f, skip, err := st.readLocked(b)
	switch {
	case skip:
		return nil, false, nil
	case err != nil: // the end, which readLocked made
	case f.Kind == wire.KindSenderError:
		st.mu.Unlock()
		return nil, true, &streamerr.SenderError{Message: f.Message}
	default:
		var ok bool
		if p, ok = f.ItemBytes(); !ok {
			err = &streamerr.ItemError{Err: errNotBinary}
			st.endLocked(err)
		}
	}
	st.mu.Unlock()
	if err != nil {
		st.home.Owner.Remove(st)
	}
	return p, true, err
}

// awaitLocked waits until the inlet holds a frame or the stream has
// ended, or ctx ends (its error is returned). The caller holds mu, and
// holds it again on return.
func (st *State) awaitLocked(ctx context.Context) (err error) {
	for err == nil && st.q.n == 0 && st.endErr == nil {
		err = st.waitLocked(ctx)
	}
	return err
}

// popLocked is Pop's loop, from the caller's lock, which it releases.
func (st *State) popLocked(ctx context.Context) (wire.Frame, error) {
	for {
		b, err := st.takeLocked(ctx)
		if err != nil {
			st.mu.Unlock()
			return wire.Frame{}, err
		}
		f, skip, err := st.readLocked(b)
		if skip {
			continue
		}
		st.mu.Unlock()
		if err != nil {
			st.home.Owner.Remove(st)
		}
		return f, err
	}
}

// takeLocked takes the next frame off the inlet, waiting for one, and
// counts its take (its room, its credit). It returns the error that ended
// the stream, again, or ctx's. The caller holds mu.
func (st *State) takeLocked(ctx context.Context) ([]byte, error) {
	if err := st.awaitLocked(ctx); err != nil {
		return nil, err
	}
	return st.takeNowLocked()
}

// takeNowLocked is takeLocked once the inlet holds a frame or the stream
// has ended.
func (st *State) takeNowLocked() ([]byte, error) {
	if st.endErr != nil {
		st.passOnLocked()
		return nil, st.endErr
	}
	b := st.q.pop()
	st.passOnLocked()
	st.wakeSpace()
	if st.feed != nil {
		st.feed.took(len(b))
	}
	return b, nil
}

// readLocked reads a frame that takeLocked took: an item or a soft error
// for the consumer, a frame to skip, or the end of the stream, which it
// makes (the caller then removes the anchor from the registry, past mu).
func (st *State) readLocked(b []byte) (f wire.Frame, skip bool, err error) {
	f, err = wire.DecodeFrame(b)
	if err != nil {
		err = &streamerr.ItemError{Err: err}
	} else {
		switch f.Kind {
		case wire.KindItem, wire.KindSenderError:
			return f, false, nil
		case wire.KindHeartbeat, wire.KindDetached:
			return wire.Frame{}, true, nil
		case wire.KindFinalized:
			err = io.EOF
		case wire.KindDropped:
			err = streamerr.ErrSenderDropped
		case wire.KindTransportError:
			err = &streamerr.TransportError{Message: f.Message}
		}
	}
	st.endLocked(err)
	return wire.Frame{}, false, err
}

// End ends the stream with err on the consumer's side (an item that does
// not decode) and removes the anchor from the registry.
func (st *State) End(err error) {
	st.mu.Lock()
	st.endLocked(err)
	st.mu.Unlock()
	st.home.Owner.Remove(st)
}

func (st *State) endLocked(err error) {
	if st.endErr == nil {
		st.endErr = err
	}
	st.q.release() // nothing enters the inlet after the end
	st.wakeData()
	st.wakeSpace()
	st.unwatchLocked()
}
