package mux

// The deterministic mux harness (docs/simulation.md): two or three nodes'
// muxes on a simulated network (transport/sim), driven inside a
// testing/synctest bubble by one goroutine that takes one step at a time
// (deliver one batch, or run one action of the scenario) and waits for
// every goroutine of the muxes to block before the next. Time is the
// bubble's, so the heartbeat windows, linger windows and accept windows of
// a run that simulates minutes take milliseconds.

import (
	"container/heap"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"testing/synctest"
	"time"

	"github.com/velo-go/velo/ext"
	"github.com/velo-go/velo/internal/muxwire"
	wire "github.com/velo-go/velo/internal/streamwire"
	"github.com/velo-go/velo/streaming/internal/inlet"
	"github.com/velo-go/velo/transport/sim"
)

// simWorld is one seeded run.
type simWorld struct {
	seed    uint64
	sc      *scenario
	rng     *rand.Rand // the scenario's draws made during the run (retry jitter)
	net     *sim.Net
	nodes   []*simNode
	streams []*simStream
	actions actionQueue
	nextAct uint64
	bad     []string         // invariant violations, in order
	lossy   bool             // the fabric lost or dropped a batch after admission
	epochs  map[epochKey]int // each lane's epochs, numbered in the order the lane first carried them
}

// simNode is one node: its mux and its endpoint on the fabric.
type simNode struct {
	w    *simWorld
	idx  int
	name string
	wid  ext.WorkerID
	mx   *Mux
	ep   *sim.Endpoint
	home *inlet.Home
}

type simOwner struct{}

func (simOwner) Remove(*inlet.State) {}
func (simOwner) CountExpired()       {}

func newSimWorld(seed uint64, sc *scenario) *simWorld {
	w := &simWorld{seed: seed, sc: sc, rng: rand.New(rand.NewPCG(seed, 0xfeed)), epochs: map[epochKey]int{}}
	w.net = sim.NewNet(sim.Config{
		Seed: seed, Latency: sc.latency, Jitter: sc.jitter, Bandwidth: sc.bandwidth, Loss: sc.loss,
		Describe: w.describeBatch,
	})
	for i := range sc.nodes {
		n := &simNode{w: w, idx: i, name: fmt.Sprintf("n%d", i), wid: ext.WorkerID(i + 1)}
		n.home = &inlet.Home{Owner: simOwner{}, Lifetime: inlet.Forever, Base: time.Now()}
		n.mx = New(sc.cfg, sc.heartbeat, n.post)
		n.mx.Epochs.Store(uint64(i+1) << 32) // a fixed base: epochs are in the trace
		n.mx.Log = discardLog
		// The health check asks the fabric instead of writing an empty
		// batch: the sweeper writes its probe while the batcher may be
		// writing a close the same tick woke it for, and which of the
		// two takes the lane first is the scheduler's choice, so a probe
		// on the wire would make the trace differ between runs. A probe
		// refused still kills the epoch.
		n.mx.ProbePost = func(peer ext.WorkerID, _ int, _ []byte) error {
			return w.net.Reachable(n.name, w.nodes[peer-1].name)
		}
		ep, err := w.net.Attach(n.name, n.recv)
		if err != nil {
			panic(err)
		}
		n.ep = ep
		w.nodes = append(w.nodes, n)
	}
	return w
}

// post is the mux's Post: one batch on the fabric. A refusal (a cut) is
// what a messenger returns for a send that was not admitted.
func (n *simNode) post(peer ext.WorkerID, lane int, batch []byte) error {
	return n.ep.Send(n.w.nodes[peer-1].name, lane, batch, nil)
}

// recv is the ordered per-sender dispatch of the batch handlers: the
// driver delivers one batch at a time, in the fabric's order.
func (n *simNode) recv(src string, lane int, data []byte) {
	var from int
	fmt.Sscanf(src, "n%d", &from)
	if err := n.mx.HandleBatch(ext.WorkerID(from+1), lane, data); err != nil {
		n.w.violate("%s: batch from %s refused: %v", n.name, src, err)
	}
	// The batch is the handler's only until it returns: the messenger then
	// releases the read buffer it lives in, and the transport reads the
	// next frames into it. Poisoned here, a record that an inlet kept
	// without copying it out reads garbage, and checkItem sees that.
	poison(data)
}

// poison overwrites a released buffer, as a transport's next read would.
func poison(b []byte) {
	for i := range b {
		b[i] = 0xa5
	}
}

func (w *simWorld) violate(format string, args ...any) {
	msg := fmt.Sprintf("t=%v: ", w.now()) + fmt.Sprintf(format, args...)
	w.bad = append(w.bad, msg)
	w.net.Mark("check", "VIOLATION "+msg)
}

func (w *simWorld) now() time.Duration { return time.Since(w.nodes[0].home.Base) }

// action is one step of the scenario at a virtual time.
type action struct {
	at  time.Time
	seq uint64
	do  func()
}

type actionQueue []*action

func (q actionQueue) Len() int { return len(q) }
func (q actionQueue) Less(i, j int) bool {
	if !q[i].at.Equal(q[j].at) {
		return q[i].at.Before(q[j].at)
	}
	return q[i].seq < q[j].seq
}
func (q actionQueue) Swap(i, j int) { q[i], q[j] = q[j], q[i] }
func (q *actionQueue) Push(x any)   { *q = append(*q, x.(*action)) }
func (q *actionQueue) Pop() any {
	old := *q
	a := old[len(old)-1]
	*q = old[:len(old)-1]
	return a
}

// after schedules do at d from now.
func (w *simWorld) after(d time.Duration, do func()) {
	w.nextAct++
	heap.Push(&w.actions, &action{at: time.Now().Add(d), seq: w.nextAct, do: do})
}

// drive runs the world until done says so or the virtual deadline passes.
// Each step first waits until every goroutine of the bubble is blocked,
// so that what the step does, and what the fabric draws, does not depend
// on the scheduler. Due batches go before due actions.
func (w *simWorld) drive(deadline time.Time, done func() bool) {
	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	for {
		synctest.Wait()
		now := time.Now()
		due, queued := w.net.Next()
		if queued && !due.After(now) {
			w.net.Step()
			w.checkStep()
			continue
		}
		if len(w.actions) > 0 && !w.actions[0].at.After(now) {
			heap.Pop(&w.actions).(*action).do()
			w.checkStep()
			continue
		}
		if done() || !now.Before(deadline) {
			return
		}
		next := deadline
		if queued && due.Before(next) {
			next = due
		}
		if len(w.actions) > 0 && w.actions[0].at.Before(next) {
			next = w.actions[0].at
		}
		timer.Reset(next.Sub(now))
		select {
		case <-timer.C:
		case <-w.net.Sent(): // a mux timer fired and its goroutine sent: look again
			timer.Stop()
		}
	}
}

type epochKey struct {
	src, dst string
	lane     int
	epoch    uint64
}

// describeBatch labels a batch in the trace: its epoch and its records,
// the control records sorted (a batcher writes them from maps, in an order
// that does not matter and is not the same twice), the data records in
// the order written.
func (w *simWorld) describeBatch(src, dst string, lane int, p []byte) string {
	b, err := muxwire.Decode(p)
	if err != nil {
		return "malformed: " + err.Error()
	}
	var data, ctl []string
	for r := b.Records(); ; {
		rec, ok := r.Next()
		if !ok {
			break
		}
		switch rec.Type {
		case muxwire.Data:
			kind := "D"
			if wire.IsTerminalFrame(rec.Body) {
				kind = "T"
			} else if string(rec.Body) == wire.HeartbeatFrame {
				kind = "H"
			}
			data = append(data, fmt.Sprintf("%s%v#%d", kind, rec.Slot, rec.Seq))
		case muxwire.OpenSlot:
			data = append(data, fmt.Sprintf("O%v#%d", rec.Slot, rec.Seq))
		case muxwire.CloseSlot:
			if rec.CloseReason() == muxwire.TerminalSent {
				data = append(data, fmt.Sprintf("C%v#%d", rec.Slot, rec.Seq))
			} else {
				ctl = append(ctl, fmt.Sprintf("C%v:%d", rec.Slot, rec.CloseReason()))
			}
		case muxwire.CreditUpdate:
			ctl = append(ctl, fmt.Sprintf("G%v+%d", rec.Slot, rec.Credit()))
		case muxwire.LifecycleSlot:
			_, act := rec.Lifecycle()
			ctl = append(ctl, fmt.Sprintf("L%v:%d", rec.Slot, act))
		default:
			ctl = append(ctl, fmt.Sprintf("?%d%v", rec.Type, rec.Slot))
		}
	}
	// Records of one slot keep their order (the per-slot order is the
	// mux's promise); records of different slots are listed by slot,
	// since the order in which slots became ready within one instant
	// (a grant on the harness's goroutine, a heartbeat on the sweeper's)
	// is the scheduler's.
	slices.SortStableFunc(data, func(a, b string) int { return strings.Compare(slotOf(a), slotOf(b)) })
	slices.Sort(ctl)
	// Not the batch_seq: a health check (ProbePost) takes one without a
	// batch, and which batch_seq it takes is the scheduler's choice. Not
	// the epoch's value either, but its ordinal on the lane: a mux hands
	// epochs to its lanes' batchers in the order it walks a map (peer
	// loss, close), which Go makes different every run.
	k := epochKey{src, dst, lane, b.Header.Epoch}
	e, ok := w.epochs[k]
	if !ok {
		e = len(w.epochs)
		for o := range w.epochs {
			if o.src == src && o.dst == dst && o.lane == lane {
				e++
			}
		}
		e -= len(w.epochs)
		w.epochs[k] = e
	}
	return fmt.Sprintf("e%d [%s | %s]", e, strings.Join(data, " "), strings.Join(ctl, " "))
}

// slotOf is the slot of a record's label: between its kind letter and '#'.
func slotOf(label string) string {
	if i := strings.IndexByte(label, '#'); i > 0 {
		return label[1:i]
	}
	return label
}
