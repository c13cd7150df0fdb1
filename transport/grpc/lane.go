package grpc

import (
	"context"
	"errors"
	"fmt"
	"io"
	"sync"
	"sync/atomic"
	"time"

	ggrpc "google.golang.org/grpc"

	"github.com/velo-go/velo/ext"
	"github.com/velo-go/velo/internal/frame"
)

// Lane modes.
const (
	running int32 = iota
	tearingDown
	aborted
)

// lane is one ordered stream to a peer: an admission gate in front of a
// queue, a writer goroutine that opens the stream and sends the queue in
// order, and a reader for what the listener writes back. A lane lives for
// one stream; when the stream ends the lane fails what it still holds and
// leaves the peer, and the next send starts a new lane (on the same client
// connection, which grpc-go redials with backoff).
type lane struct {
	t     *Transport
	p     *peer
	cc    *ggrpc.ClientConn // the peer's, as it was when the lane started
	creds *clientCreds      // cc's
	idx   int

	gate  *ext.AdmissionGate[ext.Frame]
	queue []ext.Frame // guarded by the gate's lock (Accept, Drain)
	wake  chan struct{}

	ctx    context.Context // the stream's; cancelled to end it
	cancel context.CancelFunc

	mode     atomic.Int32
	stopOnce sync.Once
	stop     chan struct{} // closed by teardown or abort
	deadline atomic.Int64  // teardown deadline, unix nanos
	done     chan struct{} // closed when the writer returned

	open     atomic.Bool // the stream is up
	graceful atomic.Bool // the listener said it is shutting down
	lostSent atomic.Bool
	cause    atomic.Pointer[error]
}

func newLane(t *Transport, p *peer, idx int) *lane {
	l := &lane{t: t, p: p, cc: p.cc, creds: p.creds, idx: idx, wake: make(chan struct{}, 1), stop: make(chan struct{}), done: make(chan struct{})}
	l.ctx, l.cancel = context.WithCancel(context.Background())
	l.gate = ext.NewAdmissionGate[ext.Frame](l, t.o.channelBytes)
	l.gate.OnBackpressure = func() { t.obs().SendBackpressure() }
	return l
}

// Accept queues an admitted frame; the gate calls it with its lock held.
func (l *lane) Accept(f ext.Frame) {
	l.queue = append(l.queue, f)
	select {
	case l.wake <- struct{}{}:
	default:
	}
}

// take moves the queue out, freeing its room in the gate.
func (l *lane) take(dst []ext.Frame) []ext.Frame {
	l.gate.Drain(func() int {
		units := 0
		for _, f := range l.queue {
			units += frame.PreambleLen + f.Len()
		}
		dst = append(dst, l.queue...)
		clear(l.queue)
		l.queue = l.queue[:0]
		return units
	})
	return dst
}

var streamDesc = ggrpc.StreamDesc{StreamName: MethodName, ServerStreams: true, ClientStreams: true}

// run is the lane's writer.
func (l *lane) run() {
	defer l.t.lanes.Done()
	defer close(l.done)
	defer l.cancel()
	// The stream lives in l.ctx. Without WaitForReady, a peer whose
	// connection is failing fails the stream at once; a first connection
	// is bounded by the connect timeout (connectParams).
	stream, err := l.cc.NewStream(l.ctx, &streamDesc, FullMethod)
	if err != nil {
		if l.ctx.Err() != nil {
			err = ext.ErrConnectionClosed // our own stop ended the wait
		}
		err = fmt.Errorf("grpc: opening the stream to %s: %w", l.p.addr, l.creds.explain(err))
		l.lost(err)
		l.finish(err)
		return
	}
	l.open.Store(true)
	l.p.stats[l.idx].streams.Add(1)
	l.t.adapter.ReportPeerConnected(l.p.id, Key, l.p.addr)
	readerDone := make(chan struct{})
	l.t.wg.Add(1)
	go l.read(stream, readerDone)
	err = l.write(stream, readerDone)
	if err == nil { // teardown: the queue is written; end the stream in order
		err = ext.ErrTransportClosed
		if stream.CloseSend() == nil {
			l.waitEnd(readerDone)
		}
	}
	l.open.Store(false)
	l.finish(err)
}

// write sends queued frames until the lane stops. It returns nil at a
// teardown once the queue is empty, or the error that ended the stream.
func (l *lane) write(stream ggrpc.ClientStream, readerDone <-chan struct{}) error {
	var batch []ext.Frame
	for {
		batch = l.take(batch[:0])
		if len(batch) == 0 {
			switch l.mode.Load() {
			case aborted:
				return ext.ErrConnectionClosed
			case tearingDown:
				return nil
			}
			select {
			case <-l.wake:
			case <-l.stop:
			}
			continue
		}
		ctr := &l.p.stats[l.idx]
		bytes := 0
		for i, f := range batch {
			if l.mode.Load() == aborted {
				ctr.wrote(i, bytes)
				l.reportAll(batch[i:], ext.ErrConnectionClosed)
				return ext.ErrConnectionClosed
			}
			out := AppendFramedData(make([]byte, 0, framedSize(f)), f)
			if err := stream.SendMsg(&message{out: out}); err != nil {
				ctr.wrote(i, bytes)
				// SendMsg says io.EOF when the stream ended; the reader
				// gets its status and reports the loss. Wait for it, so
				// the failed frames carry the loss as their cause, but not
				// past readerWait: a reader may be held by a full inbound
				// queue.
				err = fmt.Errorf("grpc: writing to %s: %w", l.p.addr, err)
				timer := time.NewTimer(readerWait)
				select {
				case <-readerDone:
				case <-timer.C:
				}
				timer.Stop()
				l.reportAll(batch[i:], err)
				return err
			}
			l.t.obs().FramesWritten(f.Type, 1)
			bytes += len(out)
			f.Release()
		}
		ctr.wrote(len(batch), bytes)
		clear(batch)
	}
}

// waitEnd waits, until the teardown deadline, for the listener to end the
// stream after the half-close: then everything sent reached its handler.
func (l *lane) waitEnd(readerDone <-chan struct{}) {
	timer := time.NewTimer(time.Until(time.Unix(0, l.deadline.Load())))
	defer timer.Stop()
	select {
	case <-readerDone:
	case <-timer.C:
	}
}

// read takes what the listener writes back on the stream.
func (l *lane) read(stream ggrpc.ClientStream, done chan<- struct{}) {
	defer l.t.wg.Done()
	defer close(done)
	a, obs := l.t.adapter, l.t.obs()
	for {
		var m message
		err := stream.RecvMsg(&m)
		if err != nil {
			if errors.Is(err, io.EOF) {
				err = errClosedByPeer
				if l.graceful.Load() {
					err = errClosedAfterGoodbye
				}
			}
			// Abort before the report: the node fails what waits on the
			// peer when it hears of the loss, and must not find this lane
			// still taking frames.
			report := l.lossReport(err)
			l.abort()
			if report != nil {
				l.t.log.Debug("grpc: stream lost", "peer", l.p.id, "lane", l.idx, "err", report)
				a.ReportPeerLost(l.p.id, report)
			}
			return
		}
		f, err := ParseFramedData(m.in, l.t.o.maxFrame)
		if err != nil {
			obs.Rejection(ext.RejectMalformed)
			l.t.log.Debug("grpc: skipped a malformed message", "peer", l.p.id, "err", err)
			continue // as the reference: a bad message is skipped
		}
		obs.Frames(ext.Inbound, f.Type, ext.Accepted, 1, f.Len())
		switch f.Type {
		case ext.ShuttingDown:
			l.graceful.Store(true)
			if len(f.Header) == 0 { // the goodbye: nothing waits on it
				continue
			}
		case ext.Message:
			// The reference admits a request that comes this way; with no
			// return path, one refused by a drain is counted and dropped,
			// and its sender waits out its own timeout.
			switch a.AdmitMessage(f) {
			case ext.Draining:
				obs.Rejection(ext.RejectDraining)
			case ext.Disconnected:
				obs.Rejection(ext.RejectRouteFailed)
			}
			continue
		}
		if !a.RouteFrame(f) {
			obs.Rejection(ext.RejectRouteFailed)
		}
	}
}

// errClosedByPeer is the end of a stream the listener closed without a
// goodbye; errClosedAfterGoodbye the end of one it closed after one.
var (
	errClosedByPeer       = fmt.Errorf("the peer ended the stream without a goodbye: %w", io.EOF)
	errClosedAfterGoodbye = fmt.Errorf("the peer ended the stream after it said it was shutting down: %w", io.EOF)
)

// lost reports the loss of the stream, once, while the lane runs.
func (l *lane) lost(err error) {
	if report := l.lossReport(err); report != nil {
		l.t.adapter.ReportPeerLost(l.p.id, report)
	}
}

// lossReport decides whether the end of the stream, with err, is a loss to
// report: not at a stop of our own (shutdown, unregister), and at most
// once per lane. After a goodbye or a drain echo the report also matches
// ext.ErrPeerShutdown.
func (l *lane) lossReport(err error) error {
	if l.mode.Load() != running || l.t.closing.Load() || !l.lostSent.CompareAndSwap(false, true) {
		return nil
	}
	why := ext.ErrPeerUnreachable
	if l.graceful.Load() {
		why = fmt.Errorf("%w: %w", ext.ErrPeerShutdown, ext.ErrPeerUnreachable)
	}
	report := fmt.Errorf("%w: grpc lane %d to %s: %w", why, l.idx, l.p.id, err)
	l.cause.Store(&report)
	return report
}

// because adds the lane's loss, once there is one, to err.
func (l *lane) because(err error) error {
	c := l.cause.Load()
	switch {
	case c == nil || errors.Is(err, *c):
		return err
	case errors.Is(*c, err):
		return *c
	}
	return fmt.Errorf("%w: %w", err, *c)
}

// abort stops the lane at once: the stream is cancelled, queued frames fail.
func (l *lane) abort() {
	l.stopOnce.Do(func() {
		l.mode.Store(aborted)
		close(l.stop)
	})
	l.cancel()
}

// teardown lets the writer write what is queued until deadline; then the
// stream is cancelled, which also ends a write blocked on flow control.
func (l *lane) teardown(deadline time.Time) {
	l.stopOnce.Do(func() {
		l.deadline.Store(deadline.UnixNano())
		l.mode.Store(tearingDown)
		close(l.stop)
		time.AfterFunc(time.Until(deadline), l.cancel)
	})
}

// finish retires the lane: it leaves the peer, so the next send starts a
// new stream, and fails what it still holds.
func (l *lane) finish(err error) {
	l.p.mu.Lock()
	if l.p.lanes[l.idx] == l {
		l.p.lanes[l.idx] = nil
	}
	l.p.mu.Unlock()
	err = l.because(err)
	l.gate.Fail(ext.ErrConnectionClosed, func(f ext.Frame) { l.report(f, err) })
	l.reportAll(l.take(nil), err)
}

func (l *lane) reportAll(fs []ext.Frame, err error) {
	for _, f := range fs {
		l.report(f, err)
	}
}

// report tells the node about a frame admitted but never written.
func (l *lane) report(f ext.Frame, err error) {
	l.t.obs().Rejection(ext.RejectSendFailed)
	l.t.adapter.ReportSendError(l.p.id, f, l.because(err))
	f.Release()
}
