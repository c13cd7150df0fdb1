package nats

import (
	"errors"
	"strconv"
	"time"

	natsgo "github.com/nats-io/nats.go"

	"github.com/velo-go/velo/ext"
	"github.com/velo-go/velo/internal/msgpeers"
)

// writer publishes one lane's frames (the lane itself, its gate and its
// goroutine are msgpeers'); its header map is reused, since PublishMsg
// encodes the headers before it returns.
type writer struct {
	t       *Transport
	l       *msgpeers.Lane
	subject string // the peer's
	hdr     natsgo.Header
	hlen    []string
	buf     []byte
	msg     natsgo.Msg
}

func newWriter(t *Transport, l *msgpeers.Lane, subject string) *writer {
	w := &writer{t: t, l: l, subject: subject, hdr: natsgo.Header{}, hlen: make([]string, 1)}
	w.hdr[HeaderLen] = w.hlen
	return w
}

// Abort does nothing: a publish only waits out a full reconnect buffer,
// and that wait ends on the lane's Gone or the grace.
func (w *writer) Abort() {}

// LinkState says whether the NATS connection is up, and the peer's
// subject (msgpeers.LinkStater).
func (w *writer) LinkState() (bool, string) { return w.t.nc.IsConnected(), w.subject }

// WriteAll publishes batch in order.
func (w *writer) WriteAll(batch []ext.Frame) {
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
	l, t := w.l, w.t
	select {
	case <-l.Gone():
		l.Failed(f, ext.ErrConnectionClosed)
		return
	default:
	}
	if t.core.PastGrace() {
		l.Failed(f, ext.ErrTransportClosed)
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
	w.msg = natsgo.Msg{Subject: w.subject, Header: w.hdr, Data: data}
	if f.Type == ext.Message {
		w.msg.Reply = t.subject
	}
	err := w.retry()
	if cap(w.buf) > 1<<20 {
		w.buf = nil // a large frame's scratch does not stay with the lane
	}
	if err != nil {
		l.Failed(f, err)
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
	l, t := w.l, w.t
	for {
		err := t.nc.PublishMsg(&w.msg)
		if !errors.Is(err, natsgo.ErrReconnectBufExceeded) {
			return err
		}
		timer := time.NewTimer(reconnectPoll)
		select {
		case <-timer.C:
		case <-l.Gone():
			timer.Stop()
			return ext.ErrConnectionClosed
		}
		if t.core.PastGrace() {
			return ext.ErrTransportClosed
		}
	}
}
