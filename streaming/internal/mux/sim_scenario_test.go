package mux

// The scenarios of the mux harness: what one seed makes happen. Every
// choice comes from the seed, drawn before the run starts, so a seed names
// one scenario; the network's own draws (jitter, loss) come from the same
// seed inside transport/sim.

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"time"

	wire "github.com/velo-go/velo/internal/streamwire"
	"github.com/velo-go/velo/streaming/internal/inlet"
	"github.com/velo-go/velo/streaming/internal/streamerr"
)

var discardLog = slog.New(slog.DiscardHandler)

// scenario is what a seed chose.
type scenario struct {
	nodes     int
	lanes     int
	cfg       Config
	heartbeat time.Duration
	latency   time.Duration
	jitter    time.Duration
	bandwidth int64
	loss      float64
	streams   []streamPlan
	faults    []faultPlan
}

// streamPlan is one stream's part in a scenario.
type streamPlan struct {
	prod, cons   int
	start        time.Duration
	items        int
	size         int           // payload bytes beyond the 8 that name the record
	sendEvery    time.Duration // between a producer's sends
	popEvery     time.Duration // between a consumer's reads (a slow consumer reads seldom)
	queuedOpen   bool          // Batcher.OpenQueued (a ticket's open) instead of Open
	cancelAt     time.Duration // the consumer cancels then (0: never)
	stopAt       time.Duration // the consumer asks the producer to stop then (0: never)
	dropInsteadF bool          // the producer ends with Dropped (its Close) instead of Finalized
}

// faultPlan is a partition of two nodes, and whether the nodes also report
// each other lost (the messenger's peer loss: every slot between them ends).
type faultPlan struct {
	a, b      int
	at, heal  time.Duration
	peerLoss  bool
	lossBurst bool // no partition: the link loses what is in flight (Cut and Heal at once)
}

// accept is the accept window of the harness's binds: an OpenSlot lost on
// the way leaves its bind to expire after it.
const simAccept = 10*time.Second + 97

// giveUp is how long a producer that cannot send waits before it closes
// its stream, as an application's request deadline would.
const simGiveUp = 30 * time.Second

func newScenario(seed uint64) *scenario {
	r := rand.New(rand.NewPCG(seed, 0x5ce7a410))
	pick := func(xs ...int) int { return xs[r.IntN(len(xs))] }
	dur := func(lo, hi time.Duration) time.Duration { return lo + time.Duration(r.Int64N(int64(hi-lo)+1)) }
	sc := &scenario{nodes: 2 + r.IntN(2), lanes: 1 + r.IntN(3)}
	sc.cfg = Config{
		InitialCredit: uint32(pick(1, 2, 3, 4, 8)),
		AsyncOpenAck:  r.IntN(2) == 0,
		MaxBatchBytes: pick(0, 0, 600, 2000),
		// Every period of the mux is set off its round default by a few
		// nanoseconds of its own, so that two timers armed in one instant
		// (a reply linger and a doorbell's floor, both from one arrival)
		// do not fire in one instant in two goroutines, whose order the
		// harness could not fix.
		ReplyLinger:         []time.Duration{1_000_003, 200_011, 3_000_019}[r.IntN(3)],
		DrainVisitFloor:     2_000_029,
		CreditSweepInterval: 200_000_053,
		MaxLinger:           1_900_037,
		BatcherIdleTTL:      60*time.Second + 71,
	}
	switch r.IntN(4) {
	case 0:
		sc.cfg.Flush = FlushManual
	case 1:
		sc.cfg.Flush = FlushLinger
		sc.cfg.OnComplete = r.IntN(2) == 0
	}
	if r.IntN(4) == 0 {
		sc.cfg.SlotByteBudget = pick(200, 1000)
	}
	// Odd lengths, so that no two periodic timers of the mux fire in the
	// same instant (a goroutine's select between two ready timers is the
	// one choice the harness cannot order).
	sc.heartbeat = time.Second + time.Duration(r.IntN(1000))*time.Millisecond + 317_089
	sc.latency = dur(20*time.Microsecond, 2*time.Millisecond)
	sc.jitter = dur(0, 3*time.Millisecond)
	if r.IntN(3) == 0 {
		sc.bandwidth = int64(pick(1<<20, 10<<20))
	}
	if r.IntN(5) == 0 {
		sc.loss = []float64{0.01, 0.05}[r.IntN(2)]
	}
	n := 2 + r.IntN(10)
	for range n {
		p := streamPlan{
			prod: r.IntN(sc.nodes), start: dur(0, 300*time.Millisecond),
			items: r.IntN(40), size: pick(0, 8, 100, 400),
			sendEvery:  dur(50*time.Microsecond, 5*time.Millisecond),
			popEvery:   dur(50*time.Microsecond, 4*time.Millisecond),
			queuedOpen: r.IntN(2) == 0, dropInsteadF: r.IntN(8) == 0,
		}
		p.cons = (p.prod + 1 + r.IntN(sc.nodes-1)) % sc.nodes
		if r.IntN(4) == 0 {
			p.popEvery = dur(100*time.Millisecond, 2*time.Second) // slow
		}
		if r.IntN(8) == 0 {
			p.cancelAt = p.start + dur(0, 500*time.Millisecond)
		}
		if r.IntN(10) == 0 {
			p.stopAt = p.start + dur(0, 300*time.Millisecond)
		}
		sc.streams = append(sc.streams, p)
	}
	if r.IntN(4) == 0 {
		f := faultPlan{a: r.IntN(sc.nodes), at: dur(10*time.Millisecond, 800*time.Millisecond), peerLoss: r.IntN(2) == 0, lossBurst: r.IntN(3) == 0}
		f.b = (f.a + 1 + r.IntN(sc.nodes-1)) % sc.nodes
		f.heal = f.at + dur(time.Millisecond, 3*time.Second)
		sc.faults = append(sc.faults, f)
	}
	return sc
}

func (sc *scenario) String() string {
	return fmt.Sprintf("%d nodes, %d lanes, C=%d, flush %d, async %v, linger %v, batch %d, slot budget %d, hb %v, lat %v+%v, bw %d, loss %v, %d streams, faults %+v",
		sc.nodes, sc.lanes, sc.cfg.InitialCredit, sc.cfg.Flush, sc.cfg.AsyncOpenAck, sc.cfg.ReplyLinger, sc.cfg.MaxBatchBytes,
		sc.cfg.SlotByteBudget, sc.heartbeat, sc.latency, sc.jitter, sc.bandwidth, sc.loss, len(sc.streams), sc.faults)
}

// simStream is one stream of a run: the consumer's anchor, the producer's
// slot, and what each side saw.
type simStream struct {
	w          *simWorld
	id         int
	plan       streamPlan
	prod, cons *simNode
	lane       int
	st         *inlet.State
	out        *OutSlot
	openFailed bool

	sent        int // items the producer queued
	stuckSince  time.Time
	finished    bool  // the producer's terminal was queued (Finish returned nil)
	prodDone    bool  // the producer is done: finished, failed or gave up
	prodErr     error // why a send or the finish failed
	got         int   // items the consumer read, in order
	ended       bool
	endErr      error
	cancelled   bool
	wantedFinal bool // the terminal queued was Finalized
}

// done is a context that has ended: the harness never blocks in a send or
// a read; a full queue or an empty inlet comes back at once.
var simDone = func() context.Context { c, cancel := context.WithCancel(context.Background()); cancel(); return c }()

func (w *simWorld) start() {
	for i, p := range w.sc.streams {
		s := &simStream{w: w, id: i, plan: p, prod: w.nodes[p.prod], cons: w.nodes[p.cons]}
		w.streams = append(w.streams, s)
		w.after(p.start, s.open)
		if p.cancelAt > 0 {
			w.after(p.cancelAt, s.cancel)
		}
		if p.stopAt > 0 {
			w.after(p.stopAt, func() {
				if s.st != nil {
					s.st.RequestStop()
				}
			})
		}
	}
	for _, f := range w.sc.faults {
		a, b := w.nodes[f.a], w.nodes[f.b]
		w.after(f.at, func() {
			w.net.Cut(a.name, b.name)
			if f.lossBurst {
				w.net.Heal(a.name, b.name)
				return
			}
			if f.peerLoss {
				a.mx.PeerLost(b.wid)
				b.mx.PeerLost(a.wid)
			}
		})
		if !f.lossBurst {
			w.after(f.heal, func() { w.net.Heal(a.name, b.name) })
		}
	}
}

// open binds the consumer's anchor and opens the producer's slot, as an
// attach and its answer do.
func (s *simStream) open() {
	w := s.w
	local := uint64(1000 + s.id)
	session := uint64(5000 + s.id)
	s.st = new(inlet.State)
	s.st.Init(s.cons.home, 256, 0, [16]byte{})
	s.st.SetHandle(wire.NewAnchorHandle(s.cons.wid, local))
	if _, why := s.st.ClaimMux(func(inlet.Prebind) bool { return false }); why != inlet.Claimed {
		w.violate("stream %d: claim: %v", s.id, why)
	}
	lane, ok := s.cons.mx.Bind(s.st, s.prod.wid, session, simAccept, w.sc.lanes, nil)
	if !ok {
		w.violate("stream %d: bind refused", s.id)
		return
	}
	s.lane = lane
	_, out, err := s.prod.mx.OpenOn(s.cons.wid, lane, func(b *Batcher) (*OutSlot, error) {
		if s.plan.queuedOpen {
			return b.OpenQueued(local, session, s.cons.mx.Cfg.InitialCredit)
		}
		return b.Open(local, session, s.cons.mx.Cfg.InitialCredit)
	})
	w.net.Mark(s.prod.name, fmt.Sprintf("open s%d lane %d: %v", s.id, lane, err))
	w.after(s.plan.popEvery, s.pop)
	if err != nil {
		s.openFailed, s.prodDone, s.prodErr = true, true, err
		return
	}
	s.out = out
	w.checkOpen(s)
	w.after(0, s.send)
}

// send queues the next item, or the terminal after the last.
func (s *simStream) send() {
	w := s.w
	if s.prodDone {
		return
	}
	if s.sent == s.plan.items {
		frame, final := inlet.FinalizedFrame, true
		if s.plan.dropInsteadF {
			frame, final = inlet.DroppedFrame, false
		}
		err := s.out.Finish(frame, false)
		w.net.Mark(s.prod.name, fmt.Sprintf("finish s%d after %d: %v", s.id, s.sent, err))
		s.prodDone, s.prodErr, s.finished, s.wantedFinal = true, err, err == nil, final && err == nil
		return
	}
	p := make([]byte, 8+s.plan.size)
	binary.BigEndian.PutUint32(p, uint32(s.id))
	binary.BigEndian.PutUint32(p[4:], uint32(s.sent))
	err := s.out.PushBytes(simDone, p)
	switch {
	case err == nil:
		s.sent++
		s.stuckSince = time.Time{}
	case errors.Is(err, context.Canceled): // full: credit or budget withheld
		if s.stuckSince.IsZero() {
			s.stuckSince = time.Now()
		} else if time.Since(s.stuckSince) > simGiveUp {
			// The application's deadline: it closes the stream.
			err = s.out.Finish(inlet.DroppedFrame, false)
			w.net.Mark(s.prod.name, fmt.Sprintf("give up s%d after %d: %v", s.id, s.sent, err))
			s.prodDone, s.prodErr = true, err
			return
		}
	default:
		w.net.Mark(s.prod.name, fmt.Sprintf("send s%d #%d: %v", s.id, s.sent, err))
		s.prodDone, s.prodErr = true, err
		return
	}
	w.after(s.plan.sendEvery, s.send)
}

// pop reads what the inlet holds now, one record per step.
func (s *simStream) pop() {
	w := s.w
	if s.ended {
		return
	}
	f, err := s.st.Pop(simDone)
	switch {
	case err == nil:
		s.checkItem(f)
		w.after(0, s.pop) // the next record, in the next step
		return
	case errors.Is(err, context.Canceled) && !s.cancelled:
		w.after(s.plan.popEvery, s.pop)
		return
	}
	s.ended, s.endErr = true, err
	w.net.Mark(s.cons.name, fmt.Sprintf("end s%d after %d: %v", s.id, s.got, err))
	s.checkEnd()
}

// cancel is the consumer's Controller.Cancel.
func (s *simStream) cancel() {
	if s.st == nil || s.ended {
		return
	}
	s.cancelled = true
	s.st.Cancel(true)
	s.w.net.Mark(s.cons.name, fmt.Sprintf("cancel s%d", s.id))
	s.w.after(0, s.pop)
}

// ended ends a consumer whose Pop error is a terminal of the stream.
func isEOF(err error) bool { return errors.Is(err, io.EOF) }

func isDropped(err error) bool { return errors.Is(err, streamerr.ErrSenderDropped) }
