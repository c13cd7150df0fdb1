package inlet

// An anchor has at most one producer (an MPSC anchor's producers share one
// claim: see mpsc.go). The three paths claim it here, under the inlet's
// lock, and nowhere else: a producer on this worker (AttachAnchor), a
// per-stream producer bound by _anchor_attach (framepath's Bind), and
// a mux pre-bind minted before any producer asked (mux_ticket.go). A claim takes
// the anchor off its unattached deadline; the undo puts it back.

// Claim is what a claim came to: Claimed, or why the anchor would not
// take the producer.
type Claim uint8

const (
	Claimed    Claim = iota // the producer holds the anchor now
	ClaimEnded              // the stream ended (not by a cancel) or the anchor closed
	ClaimTaken              // a producer or a pre-bind holds it already
)

// attachableLocked says whether a producer may attach. A cancelled anchor
// still takes one, so that the producer hears the cancel; one that ended
// any other way, or closed, does not. The caller holds mu.
func (st *State) attachableLocked() Claim {
	switch {
	case st.closed || (st.endErr != nil && !st.cancelled):
		return ClaimEnded
	case st.attached:
		return ClaimTaken
	}
	return Claimed
}

// ClaimLocal takes the anchor for a producer on this worker. Such a
// producer writes into the inlet and never claims a mux slot, so an
// unclaimed pre-bind goes back to the mux.
func (st *State) ClaimLocal() Claim {
	st.mu.Lock()
	why := st.attachableLocked()
	var release func()
	if why == Claimed {
		st.attached = true
		st.local = true
		st.disarmLocked()
		release = st.releasePrebindLocked()
	}
	st.mu.Unlock()
	if release != nil {
		release()
	}
	return why
}

// ClaimRemote takes the anchor for the per-stream producer of bind b. It
// returns whether a stop or a cancel came before the attach: those are
// sent to the producer now.
func (st *State) ClaimRemote(b Bind) (stop, cancel bool, why Claim) {
	st.mu.Lock()
	defer st.mu.Unlock()
	if why = st.attachableLocked(); why != Claimed {
		return false, false, why
	}
	st.attached = true
	st.disarmLocked() // bound: the accept window, not the unattached timeout, runs now
	st.setBindLocked(b)
	return st.stopReq, st.cancelled, Claimed
}

// UnclaimRemote undoes claimRemote when the bind cannot be kept (the node
// shuts down): the anchor is unattached again.
func (st *State) UnclaimRemote(b Bind) {
	st.mu.Lock()
	st.attached = false
	st.armLocked()
	if st.bindLocked() == b {
		st.setBindLocked(nil)
	}
	st.mu.Unlock()
}

// ClaimMux takes the anchor for a producer's attach over the mux. An
// unclaimed pre-bind is adopted (adopt moves it to the producer, under the
// inlet's lock, so the ticket can no longer open it): the adopted bind is
// returned, and ClaimTaken when its OpenSlot came first. Otherwise the
// caller binds a new session and calls unclaimMux if that fails.
func (st *State) ClaimMux(adopt func(Prebind) bool) (Prebind, Claim) {
	st.mu.Lock()
	defer st.mu.Unlock()
	if why := st.attachableLocked(); why != Claimed {
		return nil, why
	}
	if bd := st.prebindLocked(); bd != nil {
		st.setPrebindLocked(nil)
		if !adopt(bd) {
			return nil, ClaimTaken
		}
		st.attached = true
		return bd, Claimed
	}
	st.attached = true
	st.disarmLocked() // bound: the accept window runs now
	return nil, Claimed
}

// UnclaimMux undoes claimMux when the mux would not bind.
func (st *State) UnclaimMux() {
	st.mu.Lock()
	st.attached = false
	st.armLocked()
	st.mu.Unlock()
}

// ClaimPrebind holds the anchor for the mux bind bd, which an OpenSlot
// named in a ticket will claim. Unlike an attach it refuses a cancelled
// anchor: no producer has been told of the stream yet.
func (st *State) ClaimPrebind(bd Prebind) Claim {
	st.mu.Lock()
	defer st.mu.Unlock()
	switch {
	case st.closed || st.cancelled || st.endErr != nil:
		return ClaimEnded
	case st.attached || st.prebindLocked() != nil:
		return ClaimTaken
	}
	st.setPrebindLocked(bd)
	st.disarmLocked() // the accept window is the only limit on an unclaimed bind
	return Claimed
}

// UnclaimPrebind undoes claimPrebind when the mux would not take the bind.
func (st *State) UnclaimPrebind() {
	st.mu.Lock()
	st.setPrebindLocked(nil)
	st.armLocked()
	st.mu.Unlock()
}

// ReleasePrebind gives an unclaimed pre-bind back, if there is one, and
// says so; an anchor with no producer is unattached again.
func (st *State) ReleasePrebind() bool {
	st.mu.Lock()
	release := st.releasePrebindLocked()
	if release != nil && !st.attached {
		st.armLocked()
	}
	st.mu.Unlock()
	if release == nil {
		return false
	}
	release()
	return true
}

// releasePrebindLocked takes back an unclaimed pre-bind (a same-worker
// attach, a cancel, an attach that cannot use it). The caller holds mu;
// the bind leaves the mux's table by the returned func, to be called once
// the lock is released (nil when there was none).
func (st *State) releasePrebindLocked() func() {
	bd := st.prebindLocked()
	if bd == nil {
		return nil
	}
	st.setPrebindLocked(nil)
	return bd.Release
}
