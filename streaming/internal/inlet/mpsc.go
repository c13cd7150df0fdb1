package inlet

// The inlet of an MPSC anchor: one State shared by many producers,
// each frame tagged with its producer's SenderID in a ring kept in step
// with the frames. The producers on other workers (Remote, per-stream
// or mux) are kept here too, under the same lock. Every read and write of
// the MPSC anchor's fields is in this file.

import (
	"context"
	"fmt"
	"io"

	"github.com/velo-go/velo/ext"
	wire "github.com/velo-go/velo/internal/streamwire"
	"github.com/velo-go/velo/streaming/internal/retire"
	"github.com/velo-go/velo/streaming/internal/streamerr"
)

// SenderID is streaming.SenderID: one producer of an MPSC anchor. The
// anchor gives them from 1 up (AttachLocal, AddRemote), never the same
// twice.
type SenderID uint64

func (id SenderID) String() string { return fmt.Sprintf("SenderID(%d)", uint64(id)) }

// Remote is one producer of an MPSC anchor on another worker, as its
// owner sees it. Its fields are guarded by the anchor's lock; the
// methods here that take no lock read what never changes.
type Remote struct {
	core Sender // what the inlet sees as the sender
	id   SenderID
	// worker is the producer's, which attached it: only it may detach it.
	// The SenderID is a counter (its values are the application's and the
	// reference's), so a co-producer could otherwise name another's.
	worker ext.WorkerID
	conn   io.Closer // nil until the producer connects (ConnectRemote)
	ctl    Signaler  // where a stop request goes (_stream_stop; SetControl)
	feed   *Feed     // its mux slot, when it came over the mux (AttachFeed)
}

// ID is p's SenderID.
func (p *Remote) ID() SenderID { return p.id }

// Worker is the worker that attached p.
func (p *Remote) Worker() ext.WorkerID { return p.worker }

// Sender is what p's connection reader pushes as.
func (p *Remote) Sender() *Sender { return &p.core }

// mpscConns closes the connection of every remote producer of an MPSC
// anchor: it is the anchor's conn, which Cancel closes.
type mpscConns struct{ a *MPSC }

func (mc mpscConns) Close() error {
	for _, c := range mc.a.remoteConns() {
		c.Close()
	}
	return nil
}

// MPSC is the untyped part of an MPSC anchor. Its fields beyond st
// are guarded by st.mu.
type MPSC struct {
	st      State
	ids     idRing // the SenderID of each frame in st.q, in step with it
	nextID  uint64
	senders int // attached producers
	// remotes are the producers on other workers (Remote); made
	// on the first one.
	remotes map[SenderID]*Remote
}

// Push puts an item or soft-error frame of producer s (id) into the inlet,
// waiting while it is full. A cancel, the end of s, or ctx wakes it.
func (a *MPSC) Push(ctx context.Context, s *Sender, id SenderID, frame []byte) error {
	return a.st.pushTagged(ctx, s, frame, &a.ids, id)
}

// Terminate ends producer s (id) with its Detached or Dropped frame. It never
// waits: the frame goes past the inlet's capacity, behind every frame
// already there. When the last producer leaves, the unattached timeout (if
// any) starts again.
func (a *MPSC) Terminate(s *Sender, id SenderID, frame []byte) (retire.Outcome, error) {
	st := &a.st
	st.mu.Lock()
	if s.done {
		st.mu.Unlock()
		return 0, streamerr.ErrSenderClosed
	}
	s.done = true
	out, err := retire.Sent, error(nil)
	if st.closed {
		out, err = retire.Discarded, streamerr.ErrCancelled
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
	s.SettleLocked(out)
	st.mu.Unlock()
	return out, err
}

// Pop takes the next frame and its producer, skipping heartbeats. A frame
// that does not decode comes back as bad, an *ItemError of its producer,
// not as the end of the stream (end).
func (a *MPSC) Pop(ctx context.Context) (id SenderID, f wire.Frame, bad, end error) {
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
			return id, wire.Frame{}, &streamerr.ItemError{Err: err}, nil
		}
		if f.Kind == wire.KindHeartbeat {
			continue
		}
		st.mu.Unlock()
		return id, f, nil, nil
	}
}

// idRing is a FIFO of SenderIDs that grows as needed, kept in step with
// State.q.
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

// AddRemote counts a new producer from another worker and gives it its
// SenderID, as a same-worker attach does (without waiting for room: a
// handler must answer, and the producer's sends wait instead). It is
// false for an anchor that is closed or ended; a cancelled one still takes
// the producer, which hears of the cancel when its connection is closed.
func (a *MPSC) AddRemote(worker ext.WorkerID) (*Remote, bool) {
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
	p := &Remote{id: SenderID(a.nextID), worker: worker}
	p.core.st = st
	if a.remotes == nil {
		a.remotes = make(map[SenderID]*Remote)
	}
	a.remotes[p.id] = p
	return p, true
}

// EndRemote ends remote producer p with frame (its Detached or Dropped for
// the consumer) and forgets it. It is idempotent: only the first end
// counts.
func (a *MPSC) EndRemote(p *Remote, frame []byte) {
	a.Terminate(&p.core, p.id, frame)
	a.st.mu.Lock()
	if a.remotes[p.id] == p {
		delete(a.remotes, p.id)
	}
	a.st.mu.Unlock()
}

// remoteControls lists where to send a stop for each remote producer.
// The caller holds the anchor's mu.
func (a *MPSC) remoteControls() []Signaler {
	var out []Signaler
	for _, p := range a.remotes {
		if p.ctl != nil {
			out = append(out, p.ctl)
		}
	}
	return out
}

// remoteFeeds lists the mux slots of the remote producers. The caller
// holds the anchor's mu.
func (a *MPSC) remoteFeeds() []*Feed {
	var out []*Feed
	for _, p := range a.remotes {
		if p.feed != nil {
			out = append(out, p.feed)
		}
	}
	return out
}

// Producers counts the producers attached now.
func (a *MPSC) Producers() int {
	a.st.mu.Lock()
	defer a.st.mu.Unlock()
	return a.senders
}

// AttachLocal counts a producer on this worker and gives it its SenderID.
// It waits while the inlet is full, until there is room or ctx is done, so
// that producers that come and go against a consumer that does not read
// cannot grow the inlet. It returns ErrAnchorNotFound for an anchor that
// ended (not by a cancel) or closed.
func (a *MPSC) AttachLocal(ctx context.Context) (SenderID, error) {
	st := &a.st
	st.mu.Lock()
	for {
		if st.closed || (st.endErr != nil && !st.cancelled) {
			st.mu.Unlock()
			return 0, streamerr.ErrAnchorNotFound
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

// Remote is the remote producer with id, or nil.
func (a *MPSC) Remote(id SenderID) *Remote {
	a.st.mu.Lock()
	defer a.st.mu.Unlock()
	return a.remotes[id]
}

// SetControl gives remote producer p the bind its stop goes to, and says
// whether a stop came before: the caller sends it now.
func (a *MPSC) SetControl(p *Remote, ctl Signaler) (stopped bool) {
	a.st.mu.Lock()
	defer a.st.mu.Unlock()
	p.ctl = ctl
	return a.st.stopReq
}

// RemoteEnded says whether remote producer p has ended.
func (a *MPSC) RemoteEnded(p *Remote) bool {
	a.st.mu.Lock()
	defer a.st.mu.Unlock()
	return p.core.done
}

// ConnectRemote records p's per-stream connection c. It is false when the
// consumer cancelled or closed, or p ended, before c came: closing c is
// then how the producer hears of it.
func (a *MPSC) ConnectRemote(p *Remote, c io.Closer) bool {
	st := &a.st
	st.mu.Lock()
	defer st.mu.Unlock()
	if st.cancelled || st.closed || p.core.done {
		return false
	}
	p.conn = c
	return true
}

// RemoteConn is p's per-stream connection, or nil.
func (a *MPSC) RemoteConn(p *Remote) io.Closer {
	a.st.mu.Lock()
	defer a.st.mu.Unlock()
	return p.conn
}

// remoteConns lists the connections of the remote producers.
func (a *MPSC) remoteConns() []io.Closer {
	a.st.mu.Lock()
	defer a.st.mu.Unlock()
	var cs []io.Closer
	for _, p := range a.remotes {
		if p.conn != nil {
			cs = append(cs, p.conn)
		}
	}
	return cs
}

// State is the inlet a's producers share.
func (a *MPSC) State() *State { return &a.st }
