package zmq

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/go-zeromq/zmq4"

	"github.com/velo-go/velo/ext"
)

// lane is one ordered channel to a peer: an admission gate in front of a
// queue, and a writer goroutine that sends the queue in order on the
// lane's own DEALER socket.
type lane struct {
	t        *Transport
	target   ext.InstanceID
	index    int
	endpoint string
	gate     *ext.AdmissionGate[ext.Frame]
	q        []ext.Frame // the gate's sink, guarded by the gate's lock
	wake     chan struct{}

	gone     chan struct{} // closed when the peer is unregistered
	goneOnce sync.Once

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

func newLane(t *Transport, target ext.InstanceID, index int, endpoint string) *lane {
	l := &lane{t: t, target: target, index: index, endpoint: endpoint, wake: make(chan struct{}, 1), gone: make(chan struct{})}
	l.ctx, l.cancel = context.WithCancel(t.ctx)
	l.gate = ext.NewAdmissionGate[ext.Frame](l, t.o.channelBytes)
	l.gate.OnBackpressure = func() { t.observe().SendBackpressure() }
	return l
}

func units(f ext.Frame) int { return f.Len() + frameUnits }

// Accept is the gate's sink: it runs with the gate's lock held.
func (l *lane) Accept(f ext.Frame) {
	l.q = append(l.q, f)
	select {
	case l.wake <- struct{}{}:
	default:
	}
}

func (l *lane) send(f ext.Frame) (ext.SendOutcome, error) {
	if f.Owner != nil {
		f.Owner.Retain() // released once sent or failed
	}
	var out ext.SendOutcome
	var err error
	if f.Urgent {
		out, err = ext.AdmittedOutcome, l.gate.SendFirst(f, units(f))
	} else {
		out, err = l.gate.Send(f, units(f))
	}
	if err != nil {
		f.Release()
	}
	return out, err
}

// take moves the queue out, freeing its room in the gate.
func (l *lane) take(prev []ext.Frame) []ext.Frame {
	clear(prev)
	var batch []ext.Frame
	l.gate.Drain(func() int {
		batch, l.q = l.q, prev[:0]
		n := 0
		for _, f := range batch {
			n += units(f)
		}
		return n
	})
	return batch
}

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

// run sends the lane's frames in order until the peer is unregistered or
// the transport shuts down.
func (l *lane) run() {
	defer l.t.writers.Done()
	defer l.abort()
	w := &writer{l: l}
	var batch []ext.Frame
	for {
		select {
		case <-l.gone:
			l.close(ext.ErrConnectionClosed, w, batch)
			return
		default:
		}
		batch = l.take(batch)
		if len(batch) > 0 {
			w.sendAll(batch)
			continue
		}
		select {
		case <-l.wake:
		case <-l.gone:
			l.close(ext.ErrConnectionClosed, w, batch)
			return
		case <-l.t.stop:
			l.finish(w, batch)
			return
		}
	}
}

// finish runs at shutdown: Send refuses new frames by now, so the writer
// sends what is queued and what still waits in the gate, until both are
// empty or the grace ends, and fails the rest.
func (l *lane) finish(w *writer, batch []ext.Frame) {
	for !l.t.pastGrace() {
		batch = l.take(batch)
		if len(batch) == 0 && l.gate.Pending() == 0 {
			break
		}
		w.sendAll(batch)
	}
	l.close(ext.ErrTransportClosed, w, batch)
}

// close fails what waits in the gate, then sends what slipped into the
// queue before that (within the grace, and only while the peer is
// registered) and fails the rest.
func (l *lane) close(err error, w *writer, batch []ext.Frame) {
	l.gate.Fail(err, func(f ext.Frame) { l.t.failed(l.target, f, err) })
	w.sendAll(l.take(batch))
}

// closedErr is the error of a frame the lane can no longer send.
func (l *lane) closedErr() error {
	select {
	case <-l.gone:
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
			zmq4.WithID(Identity(t.id, l.index)),
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
			t.writers.Add(1)
			go l.readBack(d)
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
	defer t.writers.Done()
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
		t.observe().Frames(ext.Inbound, f.Type, ext.Accepted, 1, f.Len())
		t.route(f)
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
			w.l.t.failed(w.l.target, batch[j], err)
			batch[j] = ext.Frame{}
		}
		return
	}
}

// send sends one frame as one multipart message; it returns an error only
// when the dial failed.
func (w *writer) send(f ext.Frame) error {
	l, t := w.l, w.l.t
	select {
	case <-l.gone:
		t.failed(l.target, f, ext.ErrConnectionClosed)
		return nil
	default:
	}
	if t.pastGrace() {
		t.failed(l.target, f, ext.ErrTransportClosed)
		return nil
	}
	if w.d != nil && w.d.dead.Load() {
		w.drop()
	}
	if w.d == nil {
		d, err := l.dial()
		if err != nil {
			t.failed(l.target, f, err)
			return err
		}
		w.d = d
	}
	if err := w.d.s.SendMulti(zmq4.NewMsgFrom(frameParts(f)...)); err != nil {
		w.drop()
		err = fmt.Errorf("zmq: send to %v: %w: %w", l.target, l.sendErr(), err)
		t.failed(l.target, f, err)
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
