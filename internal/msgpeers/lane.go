package msgpeers

import (
	"sync"
	"sync/atomic"

	"github.com/velo-go/velo/ext"
)

// Writer is a transport's wire half of one lane. Only the lane's writer
// goroutine calls WriteAll; Abort may come from any goroutine.
type Writer interface {
	// WriteAll sends batch in order, reports each frame it could not send
	// with Lane.Failed, releases each one it sent, and zeroes every entry.
	// It checks Lane.Gone and Core.PastGrace per frame.
	WriteAll(batch []ext.Frame)
	// Abort ends a send under way, if the wire can; it is called when the
	// peer is dropped, when the grace ends (AbortAll) and when the writer
	// goroutine ends.
	Abort()
}

// Lane is one ordered channel to a peer: an admission gate in front of a
// queue, and a writer goroutine that hands the queue to its Writer.
type Lane struct {
	c      *Core
	target ext.InstanceID
	index  int
	w      Writer
	gate   *ext.AdmissionGate[ext.Frame]
	q      []ext.Frame // the gate's sink, guarded by the gate's lock
	wake   chan struct{}

	gone     chan struct{} // closed when the peer is unregistered
	goneOnce sync.Once

	// Counted once per batch handed to the Writer (handed*, lastWrite)
	// and once per frame it fails (failed*, rare): see stats.go.
	handedFrames, handedBytes atomic.Uint64
	failedFrames, failedBytes atomic.Uint64
	lastWrite                 atomic.Int64 // unix nanos
	takenBytes                int          // of the last take: the writer goroutine's alone
}

func newLane(c *Core, target ext.InstanceID, index int) *Lane {
	l := &Lane{c: c, target: target, index: index, wake: make(chan struct{}, 1), gone: make(chan struct{})}
	l.gate = ext.NewAdmissionGate[ext.Frame](l, c.channelBytes)
	l.gate.OnBackpressure = func() { c.Observe().SendBackpressure() }
	return l
}

// Target is the peer the lane sends to.
func (l *Lane) Target() ext.InstanceID { return l.target }

// Index is the lane's number among its peer's lanes.
func (l *Lane) Index() int { return l.index }

// Gone is closed once the peer is unregistered (or registered anew
// elsewhere): what the lane still holds fails with ext.ErrConnectionClosed.
func (l *Lane) Gone() <-chan struct{} { return l.gone }

func units(f ext.Frame) int { return f.Len() + FrameUnits }

// Accept is the gate's sink: it runs with the gate's lock held.
func (l *Lane) Accept(f ext.Frame) {
	l.q = append(l.q, f)
	select {
	case l.wake <- struct{}{}:
	default:
	}
}

func (l *Lane) send(f ext.Frame) (ext.SendOutcome, error) {
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
func (l *Lane) take(prev []ext.Frame) []ext.Frame {
	clear(prev)
	var batch []ext.Frame
	l.gate.Drain(func() int {
		batch, l.q = l.q, prev[:0]
		n := 0
		for _, f := range batch {
			n += units(f)
		}
		l.takenBytes = n - FrameUnits*len(batch)
		return n
	})
	return batch
}

// run hands the lane's frames to its Writer in order until the peer is
// unregistered or the transport shuts down.
func (l *Lane) run() {
	defer l.c.writers.Done()
	defer l.w.Abort()
	var batch []ext.Frame
	for {
		select {
		case <-l.gone:
			l.close(ext.ErrConnectionClosed, batch)
			return
		default:
		}
		batch = l.take(batch)
		if len(batch) > 0 {
			l.writeAll(batch)
			continue
		}
		select {
		case <-l.wake:
		case <-l.gone:
			l.close(ext.ErrConnectionClosed, batch)
			return
		case <-l.c.stop:
			l.finish(batch)
			return
		}
	}
}

// finish runs at shutdown: Send refuses new frames by now, so the writer
// sends what is queued and what still waits in the gate, until both are
// empty or the grace ends, and fails the rest.
func (l *Lane) finish(batch []ext.Frame) {
	for !l.c.PastGrace() {
		batch = l.take(batch)
		if len(batch) == 0 && l.gate.Pending() == 0 {
			break
		}
		l.writeAll(batch)
	}
	l.close(ext.ErrTransportClosed, batch)
}

// close fails what waits in the gate, then sends what slipped into the
// queue before that (within the grace, and only while the peer is
// registered) and fails the rest.
func (l *Lane) close(err error, batch []ext.Frame) {
	l.gate.Fail(err, func(f ext.Frame) { l.c.Failed(l.target, f, err) })
	l.writeAll(l.take(batch))
}
