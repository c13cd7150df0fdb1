package streamsock

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"runtime"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/velo-go/velo/ext"
	"github.com/velo-go/velo/internal/frame"
)

// outFrame is a frame on its way to the writer, with the time it was sent
// (only read when metrics are on). held: the transport holds a reference
// on the frame's Owner (retained when the frame went to wait in the gate).
// A small frame admitted at once is copied within Send and never held: a
// pooled request buffer then costs no atomic updates in the transport.
type outFrame struct {
	ext.Frame
	stamp time.Duration
	held  bool
}

// hold takes the transport's reference on a frame that is kept past its
// Send (the gate's OnWait).
func (f *outFrame) hold() {
	if f.Owner != nil && !f.held {
		f.Owner.Retain()
		f.held = true
	}
}

// release lets go of the transport's reference, if it holds one.
func (f *outFrame) release() {
	if f.held {
		f.held = false
		f.Release()
	}
}

// segment is one write, or two for a large frame: a run of coalesced small
// frames, or the preamble and header of one large frame with its payload
// kept in place (never copied).
type segment struct {
	buf     []byte
	payload []byte
	owner   ext.Owner // retained for a large payload that lives in a pooled buffer
	frames  int
	// off is how many bytes of buf then payload are already on the wire: an
	// inline write that stopped inside this segment. buf keeps its frames
	// whole so a failure can still be reported frame by frame.
	off int
}

// unwritten returns the parts of s that are not on the wire yet.
func (s *segment) unwritten() (buf, payload []byte) {
	if s.off <= len(s.buf) {
		return s.buf[s.off:], s.payload
	}
	return nil, s.payload[s.off-len(s.buf):]
}

// size is the number of bytes of s not on the wire yet.
func (s *segment) size() int { return len(s.buf) + len(s.payload) - s.off }

// stop modes of a lane.
const (
	running int32 = iota
	tearingDown
	aborted
)

// lane is one ordered connection to a peer: an admission gate in front of a
// segment queue, one writer goroutine that dials and writes, and one echo
// reader for drain echoes coming back on the same socket.
type lane struct {
	t    *Transport
	peer *peer
	idx  int
	gate *ext.AdmissionGate[outFrame]
	ctr  *laneCounters // the slot's, shared with the lanes before and after this one

	// Guarded by the gate's lock: Accept and the writer's take run under it.
	segs   []segment
	units  int
	counts [ext.NumMessageTypes]int
	stamps []time.Duration
	free   [][]byte
	idle   bool // the writer is parked and nobody writes
	// inlineOK: the socket is up, so a sender that finds the writer idle
	// may write its own frames (see inline.go). inlineBusy: one is writing.
	inlineOK   bool
	inlineBusy bool
	dead       bool // finish ran: what an inline write hands back fails

	claimed atomic.Bool // a sender should flush the queue inline
	// tailFollows: the last frame queued said more follow (Follows), so
	// the writer yields once before it takes the queue (run). Written
	// under the gate's lock, read by the writer without it.
	tailFollows atomic.Bool
	// When the last inline write ended and what it cost (monotonic): the
	// lesser of the last two writes' costs (wroteInline).
	inlineEnd, inlineCost time.Duration
	lastCost              time.Duration // the last inline write's own cost
	claimAt               time.Duration // when the pending inline claim was made
	raw                   syscall.RawConn
	ib                    batch    // the inline writer's batch, used by one sender at a time
	ivec                  [][]byte // its gather list
	writevFn              func(fd uintptr) bool
	wn                    int
	werr                  error

	wake     chan struct{} // capacity 1: at most one wake-up waits
	stop     chan struct{}
	stopOnce sync.Once
	mode     atomic.Int32
	deadline atomic.Int64 // unix nanos, set before stop closes on teardown

	connMu sync.Mutex
	conn   net.Conn
	// echoesDone is closed when the echo reader of conn has ended: by then
	// it has read the goodbye, if the peer sent one (awaitEchoes).
	echoesDone chan struct{}

	// graceful: the peer said it is going away on purpose (a goodbye, or
	// a drain echo), so the end of the connection is not a loss. The
	// peer's saidBye says the same for every lane to it.
	graceful atomic.Bool
	// lostSent: the loss of this lane's connection was reported.
	lostSent atomic.Bool
	// cause is that report once it is made: frames that fail after it
	// carry it, so that a caller whose frame failed learns why the
	// connection went (a peer that refused this node's certificate, say)
	// whichever of the two reports reaches it first.
	cause atomic.Pointer[error]

	vec net.Buffers // the writer's gather list, reused across writes
	// wvec is the copy of vec that a write consumes. A field, not a local:
	// a local escapes through WriteTo's interface call, one allocation
	// per write, and over TLS every write takes this path.
	wvec net.Buffers

	fenceTimer *time.Timer // lifts the fence if no confirmation does (fence.go)
}

// newLane builds a lane that is not yet running: the caller stores it in
// its peer's slot first and then calls start, so that a dial that fails at
// once finds itself in the slot and clears it. Started before the store, a
// lane that finished in the meantime would stay stored, dead, and refuse
// every later send to that peer.
func newLane(t *Transport, p *peer, idx int) *lane {
	l := &lane{t: t, peer: p, idx: idx, ctr: &p.stats[idx], wake: make(chan struct{}, 1), stop: make(chan struct{})}
	l.gate = ext.NewAdmissionGate[outFrame](l, t.cfg.ChannelBytes)
	l.gate.OnBackpressure = func() { t.obs().SendBackpressure() }
	l.gate.OnWait = (*outFrame).hold
	if p.fenced {
		l.raiseFence()
	}
	return l
}

// start runs the lane's dialer and writer.
func (l *lane) start() {
	l.t.wg.Add(1)
	l.t.writers.Add(1)
	go l.run()
}

// Accept puts an admitted frame on the queue. It runs under the gate's lock.
func (l *lane) Accept(f outFrame) {
	if f.Len() <= frame.CoalesceThreshold {
		l.appendSmall(&f.Frame)
		// Copied: a reference the transport held can go (the sender's
		// is the sender's, when this runs within its Send).
		f.release()
	} else {
		// The payload stays in place: the segment holds a reference.
		f.hold()
		l.segs = append(l.segs, segment{buf: frame.AppendPrefix(l.takeFree(), f.Frame), payload: f.Payload, owner: f.Owner, frames: 1})
	}
	l.queued(&f.Frame, f.stamp)
}

// acceptSmall is Accept for a small frame read from the sender's memory
// within its Send (gate.AdmitNowCost): it is copied into the batch here, so
// no reference is taken and no outFrame is made. It runs under the
// gate's lock.
func (l *lane) acceptSmall(f *ext.Frame) {
	l.appendSmall(f)
	l.queued(f, 0)
}

// appendSmall copies a small frame into the last coalescing segment, or a
// new one. The gate's lock is held.
func (l *lane) appendSmall(f *ext.Frame) {
	n := len(l.segs)
	if n > 0 && l.segs[n-1].payload == nil && len(l.segs[n-1].buf) < maxBatchBytes {
		s := &l.segs[n-1]
		s.buf = frame.AppendRef(growSegment(s.buf, frame.PreambleLen+f.Len()), f)
		s.frames++
	} else {
		l.segs = append(l.segs, segment{buf: frame.AppendRef(l.takeFree(), f), frames: 1})
	}
}

// queued counts a frame put on the queue and sees that someone writes it.
// The gate's lock is held.
func (l *lane) queued(f *ext.Frame, stamp time.Duration) {
	l.units += frame.PreambleLen + f.Len()
	l.counts[f.Type]++
	if f.Follows != l.tailFollows.Load() {
		l.tailFollows.Store(f.Follows)
	}
	if stamp != 0 {
		l.stamps = append(l.stamps, stamp)
	}
	if l.idle {
		l.idle = false
		// A frame that others follow (ext.Frame.Follows) wakes the writer
		// even when an inline write would be worth it: the writer's yield
		// (waitForWork) lets them queue behind it, where written inline it
		// would leave alone, a write and a read of its own on each side.
		if l.inlineOK && !f.Follows && l.inlineWorthIt() {
			// The sending goroutine writes this itself (flushInline), so
			// no goroutine is woken for it.
			l.claimed.Store(true)
		} else {
			l.wakeWriterLocked()
		}
	}
}

// growSegment makes room for a frame of n bytes in a coalescing buffer.
// One that must grow takes four times its size, up to the most a segment
// holds (frames are added while it holds less than maxBatchBytes, each at
// most CoalesceThreshold): from takeFree's 64 KiB, 256 KiB, then a whole
// segment. Append's quarter steps copied and made a buffer anew a dozen
// times on its way to a whole segment (a mux response plane's fresh lanes
// allocated a third of their bytes so); going there at once allocated and
// cleared over 1 MiB for buffers that mostly stay small: in the
// in-process response plane, 20 of 2,708 segments written grew past
// 64 KiB, 6 past 128 KiB, 1 past 256 KiB. (Doubling, 128 KiB first,
// allocated 70% more than going at once where most buffers fill a whole
// segment: --arms mux-zero-rtt --requests 8000.)
func growSegment(buf []byte, n int) []byte {
	if cap(buf)-len(buf) >= n {
		return buf
	}
	want := 4 * cap(buf)
	if want >= maxBatchBytes {
		want = maxBatchBytes + frame.CoalesceThreshold // the last step: a whole segment
	}
	want = max(want, len(buf)+n)
	grown := make([]byte, len(buf), want) // exactly: append rounds a step up
	copy(grown, buf)
	return grown
}

func (l *lane) wakeWriterLocked() {
	select {
	case l.wake <- struct{}{}:
	default:
	}
}

func (l *lane) takeFree() []byte {
	if n := len(l.free); n > 0 {
		b := l.free[n-1]
		l.free = l.free[:n-1]
		return b[:0]
	}
	return make([]byte, 0, 64<<10)
}

// batch is what the writer took off the queue in one step.
type batch struct {
	segs   []segment
	counts [ext.NumMessageTypes]int
	stamps []time.Duration
	spent  [][]byte // buffers written last round, returned on the next take
}

// take swaps the queue into b for the writer goroutine. When the queue is
// empty it marks the writer idle. While a sender writes inline the writer
// takes nothing: two writers on one socket would interleave bytes.
func (l *lane) take(b *batch) {
	l.gate.Drain(func() int {
		if l.inlineBusy {
			l.recycleLocked(b)
			clear(b.segs)
			b.segs = b.segs[:0]
			return 0
		}
		u := l.takeLocked(b)
		l.idle = len(b.segs) == 0
		return u
	})
}

// takeLocked moves the queue into b, returns b's spent buffers to the free
// list, and returns the units taken. The gate's lock is held.
func (l *lane) takeLocked(b *batch) int {
	l.recycleLocked(b)
	clear(b.segs)
	b.segs, l.segs = l.segs, b.segs[:0]
	b.stamps, l.stamps = l.stamps, b.stamps[:0]
	b.counts, l.counts = l.counts, [ext.NumMessageTypes]int{}
	u := l.units
	l.units = 0
	return u
}

func (l *lane) recycleLocked(b *batch) {
	for _, buf := range b.spent {
		// A batch buffer grows a little past maxBatchBytes (append rounds
		// up); keep it unless it is far larger.
		if cap(buf) <= maxBatchBytes*4 && len(l.free) < 8 {
			l.free = append(l.free, buf)
		}
	}
	clear(b.spent)
	b.spent = b.spent[:0]
}

func (l *lane) run() {
	defer l.t.wg.Done()
	defer l.t.writers.Done()
	conn, err := l.dial()
	if err != nil {
		l.lost(err)
		l.finish(nil, err)
		return
	}
	var b batch
	for {
		if l.tailFollows.Load() {
			// The last frame queued said more follow (ext.Frame.Follows):
			// let their senders run once more before the take, so that
			// they leave in this write and not in one of their own. With
			// 64 calls in flight the callers a read of replies woke queue
			// their requests one after another, and a writer that took
			// at once wrote the round in two or three pieces.
			runtime.Gosched()
		}
		l.take(&b)
		if len(b.segs) == 0 {
			if !l.waitForWork(&b) {
				l.finish(conn, ext.ErrConnectionClosed)
				return
			}
			if len(b.segs) == 0 {
				continue
			}
		}
		obs := l.t.obs()
		observeWaits(obs, b.stamps)
		if i, err := l.write(conn, b.segs, obs); err != nil {
			l.awaitEchoes()
			l.lost(err)
			b.written(obs, i) // what went out before the failure lets go of its buffers
			l.report(b.segs[i:], err)
			l.finish(conn, err)
			return
		}
		b.written(obs, len(b.segs))
	}
}

// observeWaits records each frame's wait from send to dequeue.
func observeWaits(obs ext.Observability, stamps []time.Duration) {
	if obs.Enabled() && len(stamps) > 0 {
		now := monotonic()
		for _, s := range stamps {
			obs.EgressQueueWait(now - s)
		}
	}
}

// written accounts the first n segments of b as written: counts them when
// they are the whole batch, keeps their buffers for reuse and lets go of
// pooled payloads.
func (b *batch) written(obs ext.Observability, n int) {
	if n == len(b.segs) {
		for t, c := range b.counts {
			if c > 0 {
				obs.FramesWritten(ext.MessageType(t), c)
			}
		}
	}
	for _, s := range b.segs[:n] {
		b.spent = append(b.spent, s.buf)
		if s.owner != nil {
			s.owner.Release()
		}
	}
}

// waitForWork parks an idle writer until a send wakes it or the lane stops.
// At teardown it takes what is still queued; it returns false when the
// writer should stop.
func (l *lane) waitForWork(b *batch) bool {
	select {
	case <-l.wake:
		// Let the goroutines that are ready run before taking the queue:
		// under concurrent calls they are the senders of the next frames,
		// and a writer that took the one frame that woke it wrote nearly
		// every frame alone (64 Unary calls in flight: about 2 writes per
		// call, 0.4 after the yield, and 40% less CPU per call). It costs a
		// lone sender nothing: a send that finds the writer idle writes
		// inline (inline.go), and with nothing else ready the yield returns
		// at once.
		runtime.Gosched()
		return true
	case <-l.stop:
		if l.mode.Load() != tearingDown {
			return false
		}
		l.waitInline()
		l.take(b)
		return len(b.segs) > 0
	}
}

// write hands the whole batch to the socket in one gathered write
// (writev): each run of coalesced small frames is one buffer, and a large
// frame is two, its preamble and header and then its payload in place, so
// the payload is never copied. Go's writev loops over short writes, so the
// large-frame fault the Rust reference avoids by writing twice cannot happen here, and
// no small segment goes on the wire alone ahead of a large payload. It
// returns the index of the first segment not wholly written on error.
func (l *lane) write(conn net.Conn, segs []segment, obs ext.Observability) (int, error) {
	base := 0 // index in the caller's segs of segs[0]
	for len(segs) > 0 {
		// Stay under the kernel's iovec limit per call.
		n := min(len(segs), maxSegmentsPerWrite)
		l.vec = l.vec[:0]
		frames := 0
		for i := range segs[:n] {
			frames += segs[i].frames
			buf, payload := segs[i].unwritten()
			l.vec = append(l.vec, buf)
			if payload != nil {
				l.vec = append(l.vec, payload)
			}
		}
		var start time.Time
		if obs.Enabled() {
			start = time.Now()
		}
		if l.t.testWriteHook != nil {
			l.t.testWriteHook(segs[:n])
		}
		l.wvec = l.vec
		written, err := l.wvec.WriteTo(conn)
		l.wvec = nil
		clear(l.vec)
		if obs.Enabled() {
			obs.WriteDuration(time.Since(start))
		}
		if err != nil {
			// Record how far the stopping segment got, so the failure
			// report skips the frames the kernel already took.
			done := firstUnwritten(segs[:n], written)
			l.ctr.wrote(framesIn(segs[:done]), written, monotonic())
			restAfter(segs[:n], done, written)
			return base + done, err
		}
		l.ctr.wrote(frames, written, monotonic())
		segs = segs[n:]
		base += n
	}
	return 0, nil
}

// framesIn counts the frames of segs.
func framesIn(segs []segment) int {
	n := 0
	for i := range segs {
		n += segs[i].frames
	}
	return n
}

// maxSegmentsPerWrite keeps one writev under IOV_MAX (1024) buffers.
const maxSegmentsPerWrite = 500

// firstUnwritten finds the segment in which a write of n bytes stopped.
func firstUnwritten(segs []segment, n int64) int {
	for i := range segs {
		size := int64(segs[i].size())
		if n < size {
			return i
		}
		n -= size
	}
	return len(segs)
}

// dial connects, giving up when the lane is aborted or, at teardown, when
// the grace runs out. Frames queue behind the dial meanwhile.
func (l *lane) dial() (net.Conn, error) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() {
		select {
		case <-l.stop:
			if l.mode.Load() == tearingDown {
				timer := time.NewTimer(time.Until(time.Unix(0, l.deadline.Load())))
				defer timer.Stop()
				select {
				case <-timer.C:
				case <-ctx.Done():
				}
			}
			cancel()
		case <-ctx.Done():
		}
	}()
	var conn net.Conn
	var err error
	if ld, ok := l.t.net.(LaneDialer); ok {
		conn, err = ld.DialLane(ctx, l.peer.endpoint, l.idx)
	} else {
		conn, err = l.t.net.Dial(ctx, l.peer.endpoint)
	}
	if err != nil {
		return nil, err
	}
	l.connMu.Lock()
	l.conn = conn
	l.connMu.Unlock()
	l.ctr.dials.Add(1)
	l.t.obs().ActiveConnections(1)
	if sc, ok := conn.(syscall.Conn); ok {
		if raw, err := sc.SyscallConn(); err == nil {
			l.gate.Drain(func() int {
				l.raw, l.inlineOK = raw, l.mode.Load() == running
				return 0
			})
		}
	}
	switch l.mode.Load() {
	case aborted:
		closeConn(conn)
	case tearingDown:
		conn.SetWriteDeadline(time.Unix(0, l.deadline.Load()))
	}
	l.echoesDone = make(chan struct{})
	l.t.wg.Add(1)
	go l.readEchoes(conn)
	if l.mode.Load() == running {
		l.t.adapter.ReportPeerConnected(l.peer.id, l.t.cfg.Key, conn.RemoteAddr().String())
	}
	return conn, nil
}

// readEchoes reads the only frames a listener sends back: ShuttingDown
// echoes, and the goodbye of a listener that shuts down. When the socket
// ends while the lane still runs, the peer went away, so the lane gives up
// its queued frames at once; without a goodbye or a drain echo first, the
// peer is reported lost.
func (l *lane) readEchoes(conn net.Conn) {
	defer l.t.wg.Done()
	defer close(l.echoesDone)
	_, r := newStallGuard(conn, l.t.cfg.MaxFrameSize, l.t.cfg.FrameTimeout, nil)
	defer r.Close()
	for {
		f, err := r.Next()
		if err != nil {
			if errors.Is(err, io.EOF) {
				err = errClosedByPeer
				if l.graceful.Load() {
					err = errClosedAfterGoodbye
				}
			}
			// Over TLS 1.3 the listener checks this end's certificate
			// after the dial returned, and its refusal comes here as an
			// alert.
			err = MarkUntrusted(err)
			// Abort before the report: the node fails what waits on the
			// peer when it hears of the loss, and a send it makes then
			// must not find the socket still open. A write after the
			// peer's FIN succeeds, so that frame would be lost silently.
			report := l.lossReport(err)
			l.abort()
			if report != nil {
				l.t.adapter.ReportPeerLost(l.peer.id, report)
			}
			return
		}
		if isConfirmation(f) {
			f.Release()
			l.liftFence()
			continue
		}
		if f.Type == ext.ShuttingDown {
			l.graceful.Store(true)
			l.peer.saidBye.Store(true)
			if len(f.Header) == 0 { // the goodbye: nothing waits on it
				f.Release()
				continue
			}
		}
		if f.Type == ext.Message {
			// A listener never sends requests back: requests come on
			// connections the node accepted, each bound to the peer it
			// proved to be (Frame.Conn). One written back on a connection
			// this node dialed would have no such binding.
			l.t.obs().Frames(ext.Inbound, f.Type, ext.Rejected, 1, f.Len())
			l.t.obs().Rejection(ext.RejectMalformed)
			f.Release()
			continue
		}
		l.t.routeInbound(f, nil)
	}
}

// errClosedByPeer is the loss of a connection that the peer closed without
// a goodbye; errClosedAfterGoodbye the end of one it closed after one.
var (
	errClosedByPeer       = fmt.Errorf("the peer closed the connection without a goodbye: %w", io.EOF)
	errClosedAfterGoodbye = fmt.Errorf("the peer closed the connection after it said it was shutting down: %w", io.EOF)
)

// lost reports, once per connection, that the connection to the peer
// ended while the lane ran: the dial failed, a write failed, or the peer
// closed or reset it. When the peer had said it was going away (a goodbye,
// or a drain echo, on this connection or another one to it) the report
// also matches ext.ErrPeerShutdown, so the node fails what still waits on
// it as refused by a shutdown rather than lost. Stops of our own
// (shutdown, unregister, a new registration) report nothing.
func (l *lane) lost(err error) {
	if report := l.lossReport(err); report != nil {
		l.t.adapter.ReportPeerLost(l.peer.id, report)
	}
}

// lossReport decides whether the end of the connection, with err, is a loss
// to report (see lost), at most once per lane, and returns the report.
func (l *lane) lossReport(err error) error {
	if l.mode.Load() != running || l.t.closing.Load() || !l.lostSent.CompareAndSwap(false, true) {
		return nil
	}
	why := ext.ErrPeerUnreachable
	if l.graceful.Load() || l.peer.saidBye.Load() {
		why = fmt.Errorf("%w: %w", ext.ErrPeerShutdown, ext.ErrPeerUnreachable)
	}
	report := fmt.Errorf("%w: %s lane %d to %s: %w", why, l.t.cfg.Key, l.idx, l.peer.id, err)
	l.cause.Store(&report)
	return report
}

// echoSettle bounds how long a writer whose write failed waits for the
// echo reader of the same connection to end (awaitEchoes). A peer that
// closed or reset the connection ends that read within microseconds; the
// bound is for a write that failed while the socket can still be read.
const echoSettle = 50 * time.Millisecond

// awaitEchoes lets a write failure wait, before the writer classifies it,
// for the echo reader of its connection to end. A peer that shuts down in
// order writes its goodbye and then closes: a write that meets the closed
// socket (a broken pipe, a reset) can fail before the reader has read the
// goodbye that came first, and the lane would report a crash, failing what
// waits on the peer at once as lost. Once the reader has ended it has
// read the goodbye if there was one, and reported the loss as a shutdown.
// A lane being stopped by this node does not classify, so it does not wait.
func (l *lane) awaitEchoes() {
	if l.mode.Load() != running || l.echoesDone == nil {
		return
	}
	if l.t.testAwaitEchoes != nil {
		l.t.testAwaitEchoes()
	}
	timer := time.NewTimer(l.t.echoSettle)
	defer timer.Stop()
	select {
	case <-l.echoesDone:
	case <-timer.C:
	}
}

// because adds the lane's loss, once there is one, to err, the error of a
// frame that failed.
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

// abort stops the lane at once: queued frames fail, the socket closes.
func (l *lane) abort() {
	l.stopOnce.Do(func() {
		l.mode.Store(aborted)
		close(l.stop)
		l.connMu.Lock()
		if l.conn != nil {
			closeConn(l.conn)
		}
		l.connMu.Unlock()
	})
}

// teardown lets the writer write what is queued until deadline.
func (l *lane) teardown(deadline time.Time) {
	l.stopOnce.Do(func() {
		l.deadline.Store(deadline.UnixNano())
		l.mode.Store(tearingDown)
		l.connMu.Lock()
		if l.conn != nil {
			l.conn.SetWriteDeadline(deadline)
		}
		l.connMu.Unlock()
		close(l.stop)
	})
	// After the mode: a dial finishing now reads tearingDown and leaves
	// inline writes off; one that finished before is undone here.
	l.gate.Drain(func() int {
		l.inlineOK = false
		return 0
	})
}

// finish retires the lane: it leaves the peer (so the next send dials a new
// connection), fails everything still queued, and closes the socket.
func (l *lane) finish(conn net.Conn, err error) {
	l.peer.lanes[l.idx].CompareAndSwap(l, nil)
	if l.fenceTimer != nil {
		l.fenceTimer.Stop()
	}
	// Sends still waiting in the gate were never admitted; their callers
	// may wait on a reply rather than on the admission, so report them too.
	l.gate.Fail(ext.ErrConnectionClosed, func(f outFrame) {
		l.t.obs().Rejection(ext.RejectSendFailed)
		l.t.adapter.ReportSendError(l.peer.id, f.Frame, l.because(err))
		f.release()
	})
	l.gate.Drain(func() int {
		l.inlineOK, l.dead = false, true
		l.claimed.Store(false)
		return 0
	})
	l.waitInline()
	var b batch
	l.take(&b)
	l.report(b.segs, err)
	if conn != nil {
		l.abort()
		closeConn(conn) // abort is a no-op after teardown, which keeps the socket open
		l.t.obs().ActiveConnections(-1)
	}
}

// report tells the node about each frame in segs that was admitted but not
// written. It re-reads the frames from the segment bytes: this path is rare,
// so the hot path keeps no per-frame bookkeeping for it.
func (l *lane) report(segs []segment, cause error) {
	if len(segs) == 0 {
		return
	}
	cause = l.because(cause)
	obs := l.t.obs()
	fail := func(f ext.Frame) {
		obs.Rejection(ext.RejectSendFailed)
		l.t.adapter.ReportSendError(l.peer.id, f, cause)
	}
	for _, s := range segs {
		if s.payload != nil {
			// A large frame; after a partial write its prefix may be short.
			f := ext.Frame{Payload: s.payload}
			if p, err := frame.ParsePreamble(s.buf, 1<<31-1); err == nil {
				f.Type, f.Header = p.Type, s.buf[frame.PreambleLen:]
			}
			fail(f)
		} else {
			for pos := 0; pos < len(s.buf); {
				f, n, _ := frame.Decode(s.buf[pos:], 1<<31-1)
				if n == 0 {
					break
				}
				pos += n
				if pos > s.off { // not wholly written before an inline write stopped
					fail(f)
				}
			}
		}
		if s.owner != nil {
			s.owner.Release()
		}
	}
}

var epoch = time.Now()

// monotonic is a cheap monotonic clock reading for egress stamps.
func monotonic() time.Duration { return time.Since(epoch) }
