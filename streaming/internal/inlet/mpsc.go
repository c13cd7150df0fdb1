package streaming

// The inlet of an MPSC anchor: one anchorState shared by many producers,
// each frame tagged with its producer's SenderID in a ring kept in step
// with the frames. The producers on other workers (mpscRemote, per-stream
// or mux) are kept here too, under the same lock. Every read and write of
// the MPSC anchor's fields is in this file.

import (
	"context"
	"net"

	"github.com/velo-go/velo/ext"
	wire "github.com/velo-go/velo/internal/streamwire"
)

// mpscAnchor is the untyped part of an MPSC anchor. Its fields beyond st
// are guarded by st.mu.
type mpscAnchor struct {
	st      anchorState
	ids     idRing // the SenderID of each frame in st.q, in step with it
	nextID  uint64
	senders int // attached producers
	// remotes are the producers on other workers (mpsc_remote.go); made
	// on the first one.
	remotes map[SenderID]*mpscRemote
}

// push puts an item or soft-error frame of producer s (id) into the inlet,
// waiting while it is full. A cancel, the end of s, or ctx wakes it.
func (a *mpscAnchor) push(ctx context.Context, s *senderCore, id SenderID, frame []byte) error {
	return a.st.pushTagged(ctx, s, frame, &a.ids, id)
}

// terminate ends producer s (id) with its Detached or Dropped frame. It never
// waits: the frame goes past the inlet's capacity, behind every frame
// already there. When the last producer leaves, the unattached timeout (if
// any) starts again.
func (a *mpscAnchor) terminate(s *senderCore, id SenderID, frame []byte) (RetireOutcome, error) {
	st := &a.st
	st.mu.Lock()
	if s.done {
		st.mu.Unlock()
		return 0, ErrSenderClosed
	}
	s.done = true
	out, err := RetireSent, error(nil)
	if st.closed {
		out, err = RetireDiscarded, ErrCancelled
	} else if st.endErr == nil {
		st.q.push(frame)
		a.ids.push(id)
		st.wakeData()
	}
	a.senders--
	if a.senders == 0 {
		st.armLocked()
	}
	st.wakeSpace() // a Send of s that waits returns ErrSenderClosed
	s.settleLocked(out)
	st.mu.Unlock()
	return out, err
}

// pop takes the next frame and its producer, skipping heartbeats. A frame
// that does not decode comes back as bad, an *ItemError of its producer,
// not as the end of the stream (end).
func (a *mpscAnchor) pop(ctx context.Context) (id SenderID, f wire.Frame, bad, end error) {
	st := &a.st
	st.mu.Lock()
	for {
		if st.endErr != nil {
			err := st.endErr
			a.ids.clear()
			st.passOnLocked()
			st.mu.Unlock()
			return 0, wire.Frame{}, nil, err
		}
		if st.q.n == 0 {
			if err := st.waitLocked(ctx); err != nil {
				st.mu.Unlock()
				return 0, wire.Frame{}, nil, err
			}
			continue
		}
		b := st.q.pop()
		st.passOnLocked()
		id = a.ids.pop()
		st.wakeSpace()
		if p := a.remotes[id]; p != nil && p.feed != nil {
			p.feed.took(len(b)) // a producer over the mux gets its credit back
		}
		f, err := wire.DecodeFrame(b)
		if err != nil {
			st.mu.Unlock()
			return id, wire.Frame{}, &ItemError{Err: err}, nil
		}
		if f.Kind == wire.KindHeartbeat {
			continue
		}
		st.mu.Unlock()
		return id, f, nil, nil
	}
}

// idRing is a FIFO of SenderIDs that grows as needed, kept in step with
// anchorState.q.
type idRing struct {
	buf  []SenderID
	head int
	n    int
}

func (r *idRing) push(id SenderID) {
	if r.n == len(r.buf) {
		nb := make([]SenderID, max(4, 2*len(r.buf)))
		for i := range r.n {
			nb[i] = r.buf[(r.head+i)%len(r.buf)]
		}
		r.buf, r.head = nb, 0
	}
	r.buf[(r.head+r.n)%len(r.buf)] = id
	r.n++
}

func (r *idRing) pop() SenderID {
	id := r.buf[r.head]
	r.head = (r.head + 1) % len(r.buf)
	r.n--
	return id
}

func (r *idRing) clear() { r.head, r.n = 0, 0 }

// addRemote counts a new producer from another worker and gives it its
// SenderID, as a same-worker attach does (without waiting for room: a
// handler must answer, and the producer's sends wait instead). It is
// false for an anchor that is closed or ended; a cancelled one still takes
// the producer, which hears of the cancel when its connection is closed.
func (a *mpscAnchor) addRemote(worker ext.WorkerID) (*mpscRemote, bool) {
	st := &a.st
	st.mu.Lock()
	defer st.mu.Unlock()
	if st.closed || (st.endErr != nil && !st.cancelled) {
		return nil, false
	}
	a.nextID++
	a.senders++
	if a.senders == 1 {
		st.disarmLocked()
	}
	p := &mpscRemote{id: SenderID(a.nextID), worker: worker}
	p.core.st = st
	if a.remotes == nil {
		a.remotes = make(map[SenderID]*mpscRemote)
	}
	a.remotes[p.id] = p
	return p, true
}

// endRemote ends remote producer p with frame (its Detached or Dropped for
// the consumer) and forgets it. It is idempotent: only the first end
// counts.
func (a *mpscAnchor) endRemote(p *mpscRemote, frame []byte) {
	a.terminate(&p.core, p.id, frame)
	a.st.mu.Lock()
	if a.remotes[p.id] == p {
		delete(a.remotes, p.id)
	}
	a.st.mu.Unlock()
}

// remoteControls lists where to send a stop for each remote producer.
// The caller holds the anchor's mu.
func (a *mpscAnchor) remoteControls() []*remoteBind {
	var out []*remoteBind
	for _, p := range a.remotes {
		if p.ctl != nil {
			out = append(out, p.ctl)
		}
	}
	return out
}

// remoteFeeds lists the mux slots of the remote producers. The caller
// holds the anchor's mu.
func (a *mpscAnchor) remoteFeeds() []*inSlot {
	var out []*inSlot
	for _, p := range a.remotes {
		if p.feed != nil {
			out = append(out, p.feed)
		}
	}
	return out
}

// producers counts the producers attached now.
func (a *mpscAnchor) producers() int {
	a.st.mu.Lock()
	defer a.st.mu.Unlock()
	return a.senders
}

// attachLocal counts a producer on this worker and gives it its SenderID.
// It waits while the inlet is full, until there is room or ctx is done, so
// that producers that come and go against a consumer that does not read
// cannot grow the inlet. It returns ErrAnchorNotFound for an anchor that
// ended (not by a cancel) or closed.
func (a *mpscAnchor) attachLocal(ctx context.Context) (SenderID, error) {
	st := &a.st
	st.mu.Lock()
	for {
		if st.closed || (st.endErr != nil && !st.cancelled) {
			st.mu.Unlock()
			return 0, ErrAnchorNotFound
		}
		if st.cancelled || st.q.n < int(st.capLim) {
			break
		}
		if st.spaceWait == nil {
			st.spaceWait = make(chan struct{})
		}
		w := st.spaceWait
		st.mu.Unlock()
		select {
		case <-w:
		case <-ctx.Done():
			return 0, ctx.Err()
		}
		st.mu.Lock()
	}
	a.nextID++
	a.senders++
	if a.senders == 1 {
		st.disarmLocked() // the unattached timeout runs only with no producer
	}
	id := SenderID(a.nextID)
	st.mu.Unlock()
	return id, nil
}

// remote is the remote producer with id, or nil.
func (a *mpscAnchor) remote(id SenderID) *mpscRemote {
	a.st.mu.Lock()
	defer a.st.mu.Unlock()
	return a.remotes[id]
}

// setControl gives remote producer p the bind its stop goes to, and says
// whether a stop came before: the caller sends it now.
func (a *mpscAnchor) setControl(p *mpscRemote, ctl *remoteBind) (stopped bool) {
	a.st.mu.Lock()
	defer a.st.mu.Unlock()
	p.ctl = ctl
	return a.st.stopReq
}

// remoteEnded says whether remote producer p has ended.
func (a *mpscAnchor) remoteEnded(p *mpscRemote) bool {
	a.st.mu.Lock()
	defer a.st.mu.Unlock()
	return p.core.done
}

// connectRemote records p's per-stream connection c. It is false when the
// consumer cancelled or closed, or p ended, before c came: closing c is
// then how the producer hears of it.
func (a *mpscAnchor) connectRemote(p *mpscRemote, c net.Conn) bool {
	st := &a.st
	st.mu.Lock()
	defer st.mu.Unlock()
	if st.cancelled || st.closed || p.core.done {
		return false
	}
	p.conn = c
	return true
}

// remoteConn is p's per-stream connection, or nil.
func (a *mpscAnchor) remoteConn(p *mpscRemote) net.Conn {
	a.st.mu.Lock()
	defer a.st.mu.Unlock()
	return p.conn
}

// remoteConns lists the connections of the remote producers.
func (a *mpscAnchor) remoteConns() []net.Conn {
	a.st.mu.Lock()
	defer a.st.mu.Unlock()
	var cs []net.Conn
	for _, p := range a.remotes {
		if p.conn != nil {
			cs = append(cs, p.conn)
		}
	}
	return cs
}
