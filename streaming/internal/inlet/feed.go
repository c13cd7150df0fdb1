package streaming

// The mux slot that feeds an anchor (or one producer of an MPSC anchor),
// as the inlet keeps it: the slot becomes the feed at its OpenSlot and
// stops being it when it ends, and records from it go past the inlet's
// limit into room that credit reserved. Every read and write of st.feed
// and every push from the mux is here, under mu.

// acceptsLocked says whether records may still enter the inlet: not after
// the consumer cancelled or closed, nor after the stream ended.
func (st *anchorState) acceptsLocked() bool {
	return !st.cancelled && !st.closed && st.endErr == nil
}

// attachFeed makes slot s the feed of the anchor, or of its MPSC
// producer, claiming bd's pre-bind when the slot's OpenSlot came with the
// ticket. It is false when the consumer cancelled or closed first. stop
// says that a stop came before the slot opened: the slot sends it on.
func (st *anchorState) attachFeed(s *inSlot, bd *muxBind) (stop, ok bool) {
	st.mu.Lock()
	defer st.mu.Unlock()
	if st.cancelled || st.closed {
		return st.stopReq, false
	}
	s.setFeedLocked(s)
	if s.mpsc == nil {
		// The slot delivers at most its credit and a terminal: size the
		// inlet once instead of growing it record by record.
		st.q.reserve(int(bd.credit) + 2)
	}
	if bd.prebound && st.prebindLocked() == bd { // the ticket's producer claims the pre-bind
		st.setPrebindLocked(nil)
		st.attached = true
	}
	return st.stopReq, true
}

// detachFeed ends slot s's feeding, if it still feeds.
func (st *anchorState) detachFeed(s *inSlot) {
	st.mu.Lock()
	if s.feedLocked() == s {
		s.setFeedLocked(nil)
	}
	st.mu.Unlock()
}

// The slot feeds an SPSC anchor directly, or one producer of an MPSC
// anchor, whose frames carry that producer's SenderID. These helpers hide
// the difference from the table.

// feedLocked is the slot the anchor (or the MPSC producer) is fed by. The
// caller holds the anchor's mu.
func (s *inSlot) feedLocked() *inSlot {
	if s.mpsc != nil {
		return s.mpsc.feed
	}
	return s.st.feed
}

func (s *inSlot) setFeedLocked(f *inSlot) {
	if s.mpsc != nil {
		s.mpsc.feed = f
	} else {
		s.st.feed = f
	}
}

// deliver puts a record from the mux into the inlet, past its limit (the
// producer's credit bounds it). It is false when the consumer is gone.
func (st *anchorState) deliver(frame []byte) bool {
	st.mu.Lock()
	defer st.mu.Unlock()
	if !st.acceptsLocked() {
		return false
	}
	st.q.push(frame)
	st.wakeData()
	return true
}

// deliverTagged puts a record of MPSC producer id into the inlet, past its
// limit. It is false when the consumer is gone.
func (st *anchorState) deliverTagged(body []byte, id SenderID) bool {
	st.mu.Lock()
	defer st.mu.Unlock()
	if !st.acceptsLocked() {
		return false
	}
	st.q.push(body)
	st.mpsc.ids.push(id)
	st.wakeData()
	return true
}

// pushRun puts a run of records into the inlet under one lock, each tagged
// with id when tagged (an MPSC producer). It returns the channel to wake a
// waiting consumer on once the caller is past the lock (nil: none waits),
// and false when the consumer is gone.
func (st *anchorState) pushRun(bodies [][]byte, id SenderID, tagged bool) (chan struct{}, bool) {
	st.mu.Lock()
	defer st.mu.Unlock()
	if !st.acceptsLocked() {
		return nil, false
	}
	st.q.reserve(st.q.n + len(bodies))
	for _, b := range bodies {
		st.q.push(b)
		if tagged {
			st.mpsc.ids.push(id)
		}
	}
	return st.wakeChanLocked(), true
}
