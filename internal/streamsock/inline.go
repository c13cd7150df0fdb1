package streamsock

import (
	"runtime"
	"time"

	"golang.org/x/sys/unix"

	"github.com/velo-go/velo/ext"
)

// Inline writes.
//
// Handing a frame to the writer goroutine costs a goroutine wake, and with
// more than one P the Go scheduler pays for that wake with a futex call and
// often a move to another thread: on a TCP ping-pong that was about 10 µs
// one way, more than the socket itself. So when the writer is parked and
// the socket is up, the sender writes its own frames: one non-blocking
// writev on the sending goroutine, no wake at all. A send still never waits
// for the wire: whatever the socket does not take at once (a full buffer, an
// error) goes back to the front of the queue and the writer goroutine is
// woken to finish it, in order.

// inlineWorthIt decides, with the gate's lock held, whether a send that
// finds the writer idle writes inline. Right after an inline write it does
// not: a sender that comes back within twice the cost of the last writes
// is sending a stream, and one write per frame would cap it at the rate of
// system calls. Waking the writer instead lets the following frames queue
// behind the wake and leave together.
func (l *lane) inlineWorthIt() bool { return l.inlineWorthItAt(monotonic()) }

func (l *lane) inlineWorthItAt(now time.Duration) bool {
	if now-l.inlineEnd <= 2*l.inlineCost {
		return false
	}
	l.claimAt = now // the inline write's start, near enough: saves a clock read
	return true
}

// wroteInline notes an inline write from start to end, with the gate's
// lock held. The cost inlineWorthIt compares with is the lesser of the
// last two writes': one write slowed by an interrupt or a descheduled
// thread (a loopback write runs the receiver's TCP input too) would
// otherwise send the next frame of a ping-pong, which comes back a round
// trip later, to the writer goroutine as if it were a stream, a wake in
// front of it: on the messenger's sequential unary run (2 cores,
// GOMAXPROCS=1) a sixth of the writes went through the writer so, a
// three-hundredth with the lesser of two. A stream's writes cost alike,
// so the lesser of two still tells it.
func (l *lane) wroteInline(start, end time.Duration) {
	cost, prev := end-start, l.lastCost
	if prev == 0 {
		prev = cost // the lane's first
	}
	l.inlineEnd, l.inlineCost, l.lastCost = end, min(cost, prev), cost
}

// flushInline writes the queue on the calling goroutine if Accept left it
// claimed for a sender. Exactly one sender wins the claim.
func (l *lane) flushInline() {
	mine := false
	var start time.Duration
	l.gate.Drain(func() int {
		if !l.claimed.Load() {
			return 0
		}
		l.claimed.Store(false)
		if l.inlineBusy {
			return 0 // the inline writer in progress finds these frames
		}
		if !l.inlineOK {
			l.wakeWriterLocked()
			return 0
		}
		l.inlineBusy, mine = true, true
		start = l.claimAt
		return l.takeLocked(&l.ib)
	})
	if !mine {
		return
	}
	b := &l.ib
	obs := l.t.obs()
	observeWaits(obs, b.stamps)
	n := min(len(b.segs), maxSegmentsPerWrite)
	written := l.writeNow(b.segs[:n], obs)
	end := monotonic()
	done := firstUnwritten(b.segs[:n], written)
	l.ctr.wrote(framesIn(b.segs[:done]), written, end)
	b.written(obs, done)
	rest := restAfter(b.segs, done, written)
	var failed []segment
	l.gate.Drain(func() int {
		l.inlineBusy = false
		l.wroteInline(start, end)
		units := 0
		if len(rest) > 0 {
			if l.dead {
				// Copied: b.segs is cleared below.
				failed = append([]segment(nil), rest...)
			} else {
				units = l.requeueLocked(rest, b)
			}
		}
		clear(b.segs)
		b.segs = b.segs[:0]
		if len(l.segs) > 0 {
			l.wakeWriterLocked()
		} else {
			l.idle = true
		}
		return -units
	})
	if failed != nil {
		l.report(failed, ext.ErrConnectionClosed)
	}
}

// writeNow makes one non-blocking writev of segs and returns the bytes the
// socket took. Errors are not reported here: the writer goroutine meets them
// again when it writes the rest, and runs the failure path.
func (l *lane) writeNow(segs []segment, obs ext.Observability) int64 {
	l.ivec = l.ivec[:0]
	for i := range segs {
		buf, payload := segs[i].unwritten()
		if len(buf) > 0 {
			l.ivec = append(l.ivec, buf)
		}
		if len(payload) > 0 {
			l.ivec = append(l.ivec, payload)
		}
	}
	var start time.Time
	if obs.Enabled() {
		start = time.Now()
	}
	if l.t.testWriteHook != nil {
		l.t.testWriteHook(segs)
	}
	if l.writevFn == nil {
		// One method value for the life of the lane: a closure per call
		// would allocate, since RawConn.Write keeps its argument.
		l.writevFn = l.writev
	}
	err := l.raw.Write(l.writevFn)
	clear(l.ivec)
	if obs.Enabled() {
		obs.WriteDuration(time.Since(start))
	}
	if err != nil || l.werr != nil || l.wn < 0 {
		return 0
	}
	return int64(l.wn)
}

// writev is the RawConn callback of writeNow. It returns true whatever
// happens, so the poller never parks the sender on the socket.
//
// One buffer goes out with write(2): the kernel's writev path copies the
// iovec in first, which cost about 0.3 µs a call on the ping-pong profile.
func (l *lane) writev(fd uintptr) bool {
	for {
		if len(l.ivec) == 1 {
			l.wn, l.werr = unix.Write(int(fd), l.ivec[0])
		} else {
			l.wn, l.werr = unix.Writev(int(fd), l.ivec)
		}
		if l.werr != unix.EINTR {
			return true
		}
	}
}

// restAfter returns the segments from index done on, the first of them
// marked with the bytes of it that were written.
func restAfter(segs []segment, done int, written int64) []segment {
	if done >= len(segs) {
		return nil
	}
	for i := range segs[:done] {
		written -= int64(segs[i].size())
	}
	rest := segs[done:]
	rest[0].off += int(written)
	return rest
}

// requeueLocked puts rest back at the front of the queue, with the counts
// of the batch, and returns the units it holds. The gate's lock is held.
func (l *lane) requeueLocked(rest []segment, b *batch) int {
	segs := make([]segment, 0, len(rest)+len(l.segs))
	segs = append(segs, rest...)
	l.segs = append(segs, l.segs...)
	for t, c := range b.counts {
		l.counts[t] += c
	}
	units := 0
	for i := range rest {
		units += rest[i].size()
	}
	l.units += units
	return units
}

// waitInline returns once no sender is writing inline. An inline write is
// one non-blocking system call, so this is short.
func (l *lane) waitInline() {
	for {
		busy := false
		l.gate.Drain(func() int {
			busy = l.inlineBusy
			return 0
		})
		if !busy {
			return
		}
		runtime.Gosched()
	}
}
