package nats

import (
	"errors"
	"strconv"
	"sync"
	"time"

	natsgo "github.com/nats-io/nats.go"

	"github.com/velo-go/velo/ext"
)

// lane is one ordered channel to a peer: an admission gate in front of a
// queue, and a writer goroutine that publishes the queue in order.
type lane struct {
	t       *Transport
	target  ext.InstanceID
	subject string
	gate    *ext.AdmissionGate[ext.Frame]
	q       []ext.Frame // the gate's sink, guarded by the gate's lock
	wake    chan struct{}

	gone     chan struct{} // closed when the peer is unregistered
	goneOnce sync.Once
}

func newLane(t *Transport, target ext.InstanceID, subject string) *lane {
	l := &lane{t: t, target: target, subject: subject, wake: make(chan struct{}, 1), gone: make(chan struct{})}
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
		f.Owner.Retain() // released once published or failed
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

// run publishes the lane's frames in order until the peer is unregistered
// or the transport shuts down.
func (l *lane) run() {
	defer l.t.writers.Done()
	w := newWriter(l)
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
			w.publishAll(batch)
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
// publishes what is queued and what still waits in the gate, until both
// are empty or the grace ends, and fails the rest.
func (l *lane) finish(w *writer, batch []ext.Frame) {
	for !l.t.pastGrace() {
		batch = l.take(batch)
		if len(batch) == 0 && l.gate.Pending() == 0 {
			break
		}
		w.publishAll(batch)
	}
	l.close(ext.ErrTransportClosed, w, batch)
}

// close fails what waits in the gate, then publishes what slipped into the
// queue before that (within the grace, and only while the peer is
// registered) and fails the rest.
func (l *lane) close(err error, w *writer, batch []ext.Frame) {
	l.gate.Fail(err, func(f ext.Frame) { l.t.failed(l.target, f, err) })
	w.publishAll(l.take(batch))
}

// writer publishes one lane's frames; its header map is reused, since
// PublishMsg encodes the headers before it returns.
type writer struct {
	l    *lane
	hdr  natsgo.Header
	hlen []string
	buf  []byte
	msg  natsgo.Msg
}

func newWriter(l *lane) *writer {
	w := &writer{l: l, hdr: natsgo.Header{}, hlen: make([]string, 1)}
	w.hdr[HeaderLen] = w.hlen
	return w
}

func (w *writer) publishAll(batch []ext.Frame) {
	for i := range batch {
		w.publish(batch[i])
		batch[i] = ext.Frame{}
	}
}

// publish sends one frame as one NATS message: headers Velo-Type and
// Velo-HLen, payload the velo header followed by the payload. A request
// names this node's inbound subject as its reply, the return path for a
// draining receiver's ShuttingDown echo.
func (w *writer) publish(f ext.Frame) {
	l, t := w.l, w.l.t
	select {
	case <-l.gone:
		t.failed(l.target, f, ext.ErrConnectionClosed)
		return
	default:
	}
	if t.pastGrace() {
		t.failed(l.target, f, ext.ErrTransportClosed)
		return
	}
	w.hdr[HeaderType] = typeValues[f.Type]
	w.hlen[0] = strconv.Itoa(len(f.Header))
	// nats.go copies the data into its buffer, so one scratch buffer
	// serves every frame; a frame without a header needs no copy.
	data := f.Payload
	if len(f.Header) > 0 {
		w.buf = append(append(w.buf[:0], f.Header...), f.Payload...)
		data = w.buf
	}
	w.msg = natsgo.Msg{Subject: l.subject, Header: w.hdr, Data: data}
	if f.Type == ext.Message {
		w.msg.Reply = t.subject
	}
	err := w.retry()
	if cap(w.buf) > 1<<20 {
		w.buf = nil // a large frame's scratch does not stay with the lane
	}
	if err != nil {
		t.failed(l.target, f, err)
		return
	}
	obs := t.observe()
	obs.Frames(ext.Outbound, f.Type, ext.Accepted, 1, f.Len())
	obs.FramesWritten(f.Type, 1)
	f.Release()
}

// retry publishes w.msg. While the server is away nats.go buffers
// publishes up to its reconnect buffer; past that the writer waits for
// the connection to come back, so the lane's channel fills and its
// senders wait in the gate, instead of the frames failing.
func (w *writer) retry() error {
	l, t := w.l, w.l.t
	for {
		err := t.nc.PublishMsg(&w.msg)
		if !errors.Is(err, natsgo.ErrReconnectBufExceeded) {
			return err
		}
		timer := time.NewTimer(reconnectPoll)
		select {
		case <-timer.C:
		case <-l.gone:
			timer.Stop()
			return ext.ErrConnectionClosed
		}
		if t.pastGrace() {
			return ext.ErrTransportClosed
		}
	}
}
