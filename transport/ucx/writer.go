package ucx

import (
	"fmt"
	"sync"

	"github.com/velo-go/velo/ext"
	"github.com/velo-go/velo/internal/msgpeers"
)

// writer posts one lane's frames as Active Messages (the lane itself, its
// gate and its goroutine are msgpeers'). UCX keeps a frame's bytes until
// its send completes, so the writer bounds what it has posted and UCX has
// not completed by the lane's channel size: when a receiver stops taking
// frames, UCX's sends stop completing, the writer waits, the lane's
// channel fills and senders wait in the gate.
type writer struct {
	t      *Transport
	l      *msgpeers.Lane
	link   *link
	window int64

	mu     sync.Mutex
	posted int64         // bytes posted and not done; guarded by mu
	room   chan struct{} // signalled when posted shrinks

	abortOnce sync.Once
	abort     chan struct{} // closed by Abort
}

// sendOverhead is what a frame costs in the window beyond its bytes, so
// a flood of empty frames is bounded too.
const sendOverhead = 64

func newWriter(t *Transport, l *msgpeers.Lane, lk *link) *writer {
	return &writer{t: t, l: l, link: lk, window: int64(t.o.channelBytes),
		room: make(chan struct{}, 1), abort: make(chan struct{})}
}

// Abort ends a wait for room in the window: the peer was dropped, or the
// teardown grace ended. Sends already posted are UCX's to finish.
func (w *writer) Abort() { w.abortOnce.Do(func() { close(w.abort) }) }

// LinkState says whether the lane's peer has a live endpoint, and names
// the peer's worker by its incarnation (msgpeers.LinkStater).
func (w *writer) LinkState() (bool, string) {
	w.link.mu.Lock()
	up := w.link.cur != nil
	w.link.mu.Unlock()
	return up, w.link.remoteName()
}

// WriteAll posts batch in order.
func (w *writer) WriteAll(batch []ext.Frame) {
	for i := range batch {
		w.write(batch[i])
		batch[i] = ext.Frame{}
	}
}

// sendOp is one posted frame: it holds the frame (and so its Owner) and
// the AM header until UCX completes the send.
type sendOp struct {
	w    *writer
	r    *epRef
	f    ext.Frame
	hdr  []byte
	cost int64
}

func (w *writer) write(f ext.Frame) {
	l, t := w.l, w.t
	cost := int64(f.Len()) + sendOverhead
	if err := w.waitRoom(cost); err != nil {
		l.Failed(f, err)
		return
	}
	r, err := w.link.acquire(1, 0)
	if err != nil {
		w.unpost(cost)
		l.Failed(f, err)
		return
	}
	op := &sendOp{w: w, r: r, f: f, cost: cost}
	op.hdr = appendFrameHeader(make([]byte, 0, incLen+len(f.Header)), t.incarnation, f.Header)
	t.posted.Add(1)
	if err := t.w.SendAM(r.id, AMIDBase+uint16(f.Type), op.hdr, f.Payload, op.done); err != nil {
		op.done(fmt.Errorf("ucx: post: %w", err))
	}
}

// waitRoom waits until cost fits the window, then counts it posted. One
// frame larger than the window goes when nothing else is posted.
func (w *writer) waitRoom(cost int64) error {
	for {
		select {
		case <-w.l.Gone():
			return ext.ErrConnectionClosed
		default:
		}
		if w.t.core.PastGrace() {
			return ext.ErrTransportClosed
		}
		w.mu.Lock()
		if w.posted == 0 || w.posted+cost <= w.window {
			w.posted += cost
			w.mu.Unlock()
			return nil
		}
		w.mu.Unlock()
		select {
		case <-w.room:
		case <-w.l.Gone():
		case <-w.abort:
			if w.t.core.PastGrace() {
				return ext.ErrTransportClosed
			}
			return ext.ErrConnectionClosed
		}
	}
}

func (w *writer) unpost(cost int64) {
	w.mu.Lock()
	w.posted -= cost
	w.mu.Unlock()
	select {
	case w.room <- struct{}{}:
	default:
	}
}

// done runs once per posted frame, on the worker's progress goroutine
// (or in write when the post itself failed): it frees the frame's room,
// counts the send done on its endpoint, and reports a failure.
func (op *sendOp) done(err error) {
	w, t, f := op.w, op.w.t, op.f
	w.unpost(op.cost)
	op.r.sendDone()
	if err != nil {
		w.l.Failed(f, fmt.Errorf("ucx: send to %s: %w: %w", op.r.l.who(), ext.ErrConnectionClosed, err))
	} else {
		obs := t.core.Observe()
		obs.Frames(ext.Outbound, f.Type, ext.Accepted, 1, f.Len())
		obs.FramesWritten(f.Type, 1)
		f.Release()
	}
	if t.posted.Add(-1) == 0 && t.drainWait.Load() {
		select {
		case t.drained <- struct{}{}:
		default:
		}
	}
}
