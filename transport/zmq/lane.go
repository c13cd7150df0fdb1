package zmq

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/go-zeromq/zmq4"

	"github.com/velo-go/velo/ext"
	"github.com/velo-go/velo/internal/msgpeers"
)

// lane is the socket half of one ordered channel to a peer: its own
// DEALER socket, dialled when a frame is to go and none is connected. The
// gate, the queue and the writer goroutine are msgpeers', which hands
// each batch to WriteAll.
type lane struct {
	t        *Transport
	shared   *msgpeers.Lane
	endpoint string
	w        writer // used by the writer goroutine alone

	// ctx ends when the lane is aborted (unregister, or the end of the
	// teardown grace); it stops a dial in progress.
	ctx    context.Context
	cancel context.CancelFunc

	mu      sync.Mutex
	sock    *dealer // the connected socket, closed by abort
	aborted bool
}

// dealer is one connected DEALER socket; dead is set once its connection
// has failed, so the next frame dials a new one.
type dealer struct {
	s    zmq4.Socket
	dead atomic.Bool
}

func newLane(t *Transport, l *msgpeers.Lane, endpoint string) *lane {
	zl := &lane{t: t, shared: l, endpoint: endpoint}
	zl.w.l = zl
	zl.ctx, zl.cancel = context.WithCancel(t.ctx)
	return zl
}

// LinkState says whether the lane holds a live socket, and its endpoint
// (msgpeers.LinkStater).
func (l *lane) LinkState() (bool, string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.sock != nil && !l.sock.dead.Load(), l.endpoint
}

// WriteAll sends batch in order on the lane's socket.
func (l *lane) WriteAll(batch []ext.Frame) { l.w.sendAll(batch) }

// Abort is abort (msgpeers.Writer).
func (l *lane) Abort() { l.abort() }

// abort stops the lane's dials and closes its socket, which ends a send
// blocked on a peer that does not read.
func (l *lane) abort() {
	l.cancel()
	l.mu.Lock()
	l.aborted = true
	d := l.sock
	l.sock = nil
	l.mu.Unlock()
	if d != nil {
		d.s.Close()
	}
}

// closedErr is the error of a frame the lane can no longer send.
func (l *lane) closedErr() error {
	select {
	case <-l.shared.Gone():
		return ext.ErrConnectionClosed
	default:
		return ext.ErrTransportClosed
	}
}

// dial connects a new DEALER socket, trying again every reconnect
// interval until the send timeout. A connected socket gets a reader for
// its return path (the drain echo).
func (l *lane) dial() (*dealer, error) {
	t := l.t
	deadline := time.Now().Add(t.o.sendTimeout)
	for {
		if l.ctx.Err() != nil {
			return nil, l.closedErr()
		}
		s := zmq4.NewDealer(l.ctx,
			zmq4.WithID(Identity(t.id, l.shared.Index())),
			zmq4.WithLogger(quiet),
			zmq4.WithDialerMaxRetries(0), // the loop here retries, and can stop
			zmq4.WithDialerTimeout(max(time.Until(deadline), time.Millisecond)),
			zmq4.WithTimeout(t.o.sendTimeout))
		err := s.Dial(guardedEndpoint(l.endpoint, t.o.maxFrameSize))
		if err == nil {
			d := &dealer{s: s}
			l.mu.Lock()
			if l.aborted {
				l.mu.Unlock()
				s.Close()
				return nil, l.closedErr()
			}
			l.sock = d
			l.mu.Unlock()
			t.dials.Add(1)
			t.core.Go(func() { l.readBack(d) })
			return d, nil
		}
		s.Close()
		if !time.Now().Before(deadline) {
			return nil, fmt.Errorf("zmq: dial %s: %w: %w", l.endpoint, ext.ErrPeerUnreachable, err)
		}
		timer := time.NewTimer(min(t.o.retry, time.Until(deadline)))
		select {
		case <-timer.C:
		case <-l.ctx.Done():
			timer.Stop()
		}
	}
}

// readBack reads what the peer's ROUTER sends back on this socket (a
// ShuttingDown echo) until the socket closes or its connection fails.
func (l *lane) readBack(d *dealer) {
	t := l.t
	for {
		m, err := d.s.Recv()
		if err != nil {
			d.dead.Store(true)
			return
		}
		f, ok := parseParts(m.Frames, t.o.maxFrameSize)
		if !ok || f.Type == ext.Message {
			// A ROUTER sends no request back on a DEALER's connection.
			t.malformed.Add(1)
			t.observe().Rejection(ext.RejectMalformed)
			continue
		}
		t.core.Deliver(f) // not a request, so never refused
	}
}

// writer sends one lane's frames on its current socket, dialling when it
// has none or its connection died.
type writer struct {
	l *lane
	d *dealer
}

func (w *writer) sendAll(batch []ext.Frame) {
	for i := range batch {
		err := w.send(batch[i])
		batch[i] = ext.Frame{}
		if err == nil {
			continue
		}
		// The peer was not reached within the send timeout: what is
		// queued behind fails too, rather than each frame waiting out a
		// timeout of its own. The next frame dials again.
		for j := i + 1; j < len(batch); j++ {
			w.l.shared.Failed(batch[j], err)
			batch[j] = ext.Frame{}
		}
		return
	}
}

// send sends one frame as one multipart message; it returns an error only
// when the dial failed.
func (w *writer) send(f ext.Frame) error {
	l, t := w.l, w.l.t
	target := l.shared.Target()
	select {
	case <-l.shared.Gone():
		l.shared.Failed(f, ext.ErrConnectionClosed)
		return nil
	default:
	}
	if t.core.PastGrace() {
		l.shared.Failed(f, ext.ErrTransportClosed)
		return nil
	}
	if w.d != nil && w.d.dead.Load() {
		w.drop()
	}
	if w.d == nil {
		d, err := l.dial()
		if err != nil {
			l.shared.Failed(f, err)
			return err
		}
		w.d = d
	}
	if err := w.d.s.SendMulti(zmq4.NewMsgFrom(frameParts(f)...)); err != nil {
		w.drop()
		err = fmt.Errorf("zmq: send to %v: %w: %w", target, l.sendErr(), err)
		l.shared.Failed(f, err)
		return nil
	}
	obs := t.observe()
	obs.Frames(ext.Outbound, f.Type, ext.Accepted, 1, f.Len())
	obs.FramesWritten(f.Type, 1)
	f.Release()
	return nil
}

// sendErr classifies a failed send: the lane aborted, or the connection
// broke under it.
func (l *lane) sendErr() error {
	if l.ctx.Err() != nil {
		return l.closedErr()
	}
	return ext.ErrConnectionClosed
}

// drop closes the writer's socket so the next frame dials a new one.
func (w *writer) drop() {
	l := w.l
	l.mu.Lock()
	if l.sock == w.d {
		l.sock = nil
	}
	l.mu.Unlock()
	w.d.s.Close()
	w.d = nil
}
