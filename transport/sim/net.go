package sim

import (
	"container/heap"
	"errors"
	"fmt"
	"hash/fnv"
	"math/rand/v2"
	"slices"
	"sync"
	"time"
)

// Errors of a send the fabric refuses. Each is matchable with errors.Is.
var (
	// ErrPartitioned: Cut separates the two endpoints.
	ErrPartitioned = errors.New("sim: endpoints are partitioned")
	// ErrUnknownEndpoint: no live endpoint has the destination's name.
	ErrUnknownEndpoint = errors.New("sim: no such endpoint")
	// ErrClosed: the Net was closed, or the sender left it.
	ErrClosed = errors.New("sim: network closed")
	// ErrAborted: the abort channel of a send waiting for room closed.
	ErrAborted = errors.New("sim: send aborted")
)

// Config shapes a Net. The zero value is a lossless network with no
// delay, no bandwidth limit and seed 0.
type Config struct {
	// Seed drives every random choice of the Net: jitter and loss.
	Seed uint64
	// Latency is the base one-way delay of every transfer.
	Latency time.Duration
	// Jitter is the most a transfer waits beyond Latency, drawn per
	// transfer from [0, Jitter): what lets one lane overtake another.
	Jitter time.Duration
	// Bandwidth is the bytes per second of each (source, destination)
	// link, shared by its lanes; 0 means unlimited.
	Bandwidth int64
	// Loss is the probability that a transfer the fabric accepted is
	// lost on the way (it is never delivered, and its sender is not
	// told, as with a connection that broke after the write).
	Loss float64
	// Window bounds the bytes in flight on one (source, destination,
	// lane): a send beyond it waits until earlier transfers are
	// delivered, as a writer waits on a full socket buffer. 0 means
	// unlimited. A message larger than the window goes when its lane is
	// empty.
	Window int
	// Describe labels a message from src to dst on lane in the trace; nil
	// labels it with a hash of its bytes. It is called once per message,
	// in the trace's order, with the Net's lock held: it must not call
	// the Net.
	Describe func(src, dst string, lane int, data []byte) string
}

// Handler takes a message delivered to an endpoint: from src, on lane.
// The fabric keeps no reference to data after the call returns.
type Handler func(src string, lane int, data []byte)

// Net is the fabric. Its methods are safe for concurrent use.
type Net struct {
	cfg   Config
	start time.Time

	mu      sync.Mutex
	rng     *rand.Rand
	eps     map[string]*Endpoint
	links   map[pairKey]*link // by (source, destination)
	lanes   map[laneKey]*laneState
	cuts    map[pairKey]bool // normalized pairs (a < b)
	pending []*transfer      // sent since the last settle
	queue   transferHeap
	seq     uint64
	trace   []Event
	lost    int // transfers lost or dropped after they were accepted
	closed  bool
	room    chan struct{} // closed when bytes in flight go down
	sent    chan struct{} // cap 1: something was sent

	// Run mode: the pump goroutine.
	running bool
	wake    chan struct{}
	stop    chan struct{}
	done    chan struct{}
}

type pairKey struct{ a, b string }

type laneKey struct {
	src, dst string
	lane     int
}

type link struct{ free time.Time } // when the link finishes its last transfer

type laneState struct {
	last     time.Time // due time of the lane's last transfer
	inflight int       // bytes sent and not yet delivered or dropped
}

type transfer struct {
	src, dst string
	lane     int
	data     []byte
	sentAt   time.Time
	due      time.Time
	seq      uint64
	refused  error // set for a refused send: only traced
	label    string
	index    int
}

// NewNet makes an empty Net.
func NewNet(cfg Config) *Net {
	return &Net{
		cfg:   cfg,
		start: time.Now(),
		rng:   rand.New(rand.NewPCG(cfg.Seed, cfg.Seed^0x9e3779b97f4a7c15)),
		eps:   map[string]*Endpoint{},
		links: map[pairKey]*link{},
		lanes: map[laneKey]*laneState{},
		cuts:  map[pairKey]bool{},
		room:  make(chan struct{}),
		sent:  make(chan struct{}, 1),
	}
}

// Endpoint is one node's attachment to the Net.
type Endpoint struct {
	n      *Net
	name   string
	recv   Handler
	onDown func(peer string)
	dead   bool
	// contacts are the endpoints it exchanged messages with: those that
	// a Kill of either tells.
	contacts map[string]bool
}

// Attach adds an endpoint named name that receives with recv.
func (n *Net) Attach(name string, recv Handler) (*Endpoint, error) {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.closed {
		return nil, ErrClosed
	}
	if e := n.eps[name]; e != nil && !e.dead {
		return nil, fmt.Errorf("sim: endpoint %q is attached already", name)
	}
	e := &Endpoint{n: n, name: name, recv: recv, contacts: map[string]bool{}}
	n.eps[name] = e
	return e, nil
}

// Name is the endpoint's name on its Net.
func (e *Endpoint) Name() string { return e.name }

// OnPeerDown sets what Kill tells this endpoint when an endpoint it
// exchanged messages with dies. Set it before traffic starts.
func (e *Endpoint) OnPeerDown(f func(peer string)) {
	e.n.mu.Lock()
	e.onDown = f
	e.n.mu.Unlock()
}

// Send sends data (copied) to dst on lane. It fails at once when the two
// endpoints are partitioned or dst is unknown; with a Window it waits for
// room on the lane until abort closes (nil: no abort).
func (e *Endpoint) Send(dst string, lane int, data []byte, abort <-chan struct{}) error {
	n := e.n
	k := laneKey{e.name, dst, lane}
	n.mu.Lock()
	for {
		if err := n.refusalLocked(e, dst); err != nil {
			n.addLocked(&transfer{src: e.name, dst: dst, lane: lane, sentAt: time.Now(), refused: err, label: n.describe(e.name, dst, lane, data)})
			n.mu.Unlock()
			return err
		}
		ls := n.laneLocked(k)
		if n.cfg.Window <= 0 || ls.inflight == 0 || ls.inflight+len(data) <= n.cfg.Window {
			ls.inflight += len(data)
			break
		}
		room := n.room
		n.mu.Unlock()
		select {
		case <-room:
		case <-abort:
			return ErrAborted
		}
		n.mu.Lock()
	}
	e.contacts[dst] = true
	n.addLocked(&transfer{src: e.name, dst: dst, lane: lane, data: append([]byte(nil), data...), sentAt: time.Now()})
	n.mu.Unlock()
	return nil
}

// refusalLocked is why a send from e to dst fails now, or nil.
func (n *Net) refusalLocked(e *Endpoint, dst string) error {
	switch d := n.eps[dst]; {
	case n.closed || e.dead:
		return ErrClosed
	case d == nil || d.dead:
		return ErrUnknownEndpoint
	case n.cuts[normPair(e.name, dst)]:
		return ErrPartitioned
	}
	return nil
}

// addLocked queues t for the next settle (at once in Run mode) and
// signals Sent.
func (n *Net) addLocked(t *transfer) {
	n.pending = append(n.pending, t)
	if n.running {
		n.settleLocked()
		select {
		case n.wake <- struct{}{}:
		default:
		}
	}
	select {
	case n.sent <- struct{}{}:
	default:
	}
}

func (n *Net) laneLocked(k laneKey) *laneState {
	ls := n.lanes[k]
	if ls == nil {
		ls = &laneState{}
		n.lanes[k] = ls
	}
	return ls
}

func normPair(a, b string) pairKey {
	if b < a {
		a, b = b, a
	}
	return pairKey{a, b}
}

func (n *Net) describe(src, dst string, lane int, data []byte) string {
	if n.cfg.Describe != nil {
		return n.cfg.Describe(src, dst, lane, data)
	}
	h := fnv.New64a()
	h.Write(data)
	return fmt.Sprintf("%016x", h.Sum64())
}

// Sent is signalled (it holds one token) whenever something is sent: a
// driver that waits for the next due transfer waits on it too, since a
// send can make a transfer due sooner.
func (n *Net) Sent() <-chan struct{} { return n.sent }

// Settle schedules what was sent since the last call. It orders those
// sends by source, destination and lane (keeping each lane's own order)
// before it draws their jitter and loss, so that a caller who settles
// only while the code under test is quiescent gets the same draws for
// the same seed. Next and Step settle first.
func (n *Net) Settle() {
	n.mu.Lock()
	n.settleLocked()
	n.mu.Unlock()
}

func (n *Net) settleLocked() {
	if len(n.pending) == 0 {
		return
	}
	ps := n.pending
	n.pending = nil
	slices.SortStableFunc(ps, func(x, y *transfer) int {
		switch {
		case x.src != y.src:
			return cmpStr(x.src, y.src)
		case x.dst != y.dst:
			return cmpStr(x.dst, y.dst)
		}
		return x.lane - y.lane
	})
	for _, t := range ps {
		n.scheduleLocked(t)
	}
}

func cmpStr(a, b string) int {
	if a < b {
		return -1
	}
	return 1
}

// scheduleLocked gives t its due time, or loses it.
func (n *Net) scheduleLocked(t *transfer) {
	at := t.sentAt.Sub(n.start)
	if t.refused != nil {
		n.trace = append(n.trace, Event{At: at, Kind: Refuse, Src: t.src, Dst: t.dst, Lane: t.lane, Label: t.label, Note: t.refused.Error()})
		return
	}
	t.label = n.describe(t.src, t.dst, t.lane, t.data)
	n.trace = append(n.trace, Event{At: at, Kind: SendEv, Src: t.src, Dst: t.dst, Lane: t.lane, Size: len(t.data), Label: t.label})
	if n.cfg.Loss > 0 && n.rng.Float64() < n.cfg.Loss {
		n.lost++
		n.trace = append(n.trace, Event{At: at, Kind: Loss, Src: t.src, Dst: t.dst, Lane: t.lane, Size: len(t.data), Label: t.label})
		n.releaseLocked(t)
		return
	}
	l := n.links[pairKey{t.src, t.dst}]
	if l == nil {
		l = &link{}
		n.links[pairKey{t.src, t.dst}] = l
	}
	begin := t.sentAt
	if l.free.After(begin) {
		begin = l.free
	}
	if bw := n.cfg.Bandwidth; bw > 0 {
		begin = begin.Add(time.Duration(int64(len(t.data)) * int64(time.Second) / bw))
	}
	l.free = begin
	due := begin.Add(n.cfg.Latency)
	if n.cfg.Jitter > 0 {
		due = due.Add(time.Duration(n.rng.Int64N(int64(n.cfg.Jitter))))
	}
	ls := n.laneLocked(laneKey{t.src, t.dst, t.lane})
	if due.Before(ls.last) {
		due = ls.last // a lane is ordered: never due before the one ahead of it
	}
	ls.last = due
	n.seq++
	t.due, t.seq = due, n.seq
	heap.Push(&n.queue, t)
}

// releaseLocked frees t's bytes in its lane's window.
func (n *Net) releaseLocked(t *transfer) {
	if ls := n.lanes[laneKey{t.src, t.dst, t.lane}]; ls != nil {
		ls.inflight -= len(t.data)
	}
	close(n.room)
	n.room = make(chan struct{})
}

// Next settles and reports when the earliest queued transfer is due.
func (n *Net) Next() (time.Time, bool) {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.settleLocked()
	if len(n.queue) == 0 {
		return time.Time{}, false
	}
	return n.queue[0].due, true
}

// Queued is the number of transfers in flight (scheduled, not yet
// delivered or dropped).
func (n *Net) Queued() int {
	n.mu.Lock()
	defer n.mu.Unlock()
	return len(n.queue) + len(n.pending)
}

// Step settles and delivers the earliest transfer if it is due by now,
// on the caller's goroutine. It reports whether it took one from the
// queue (a transfer whose destination died is dropped, and counts).
func (n *Net) Step() bool {
	n.mu.Lock()
	n.settleLocked()
	if len(n.queue) == 0 || n.queue[0].due.After(time.Now()) {
		n.mu.Unlock()
		return false
	}
	t := heap.Pop(&n.queue).(*transfer)
	recv := n.takeLocked(t)
	n.mu.Unlock()
	if recv != nil {
		recv(t.src, t.lane, t.data)
	}
	return true
}

// takeLocked traces the end of t, popped from the queue, and returns the
// handler to deliver it to (nil: dropped).
func (n *Net) takeLocked(t *transfer) Handler {
	n.releaseLocked(t)
	at := time.Since(n.start)
	d := n.eps[t.dst]
	switch {
	case d == nil || d.dead:
		n.lost++
		n.trace = append(n.trace, Event{At: at, Kind: Drop, Src: t.src, Dst: t.dst, Lane: t.lane, Size: len(t.data), Label: t.label, Note: "destination gone"})
		return nil
	case n.cuts[normPair(t.src, t.dst)]:
		n.lost++
		// Cut drops what is queued; this one was sent after a heal and
		// the pair was cut again.
		n.trace = append(n.trace, Event{At: at, Kind: Drop, Src: t.src, Dst: t.dst, Lane: t.lane, Size: len(t.data), Label: t.label, Note: "partitioned"})
		return nil
	}
	d.contacts[t.src] = true
	n.trace = append(n.trace, Event{At: at, Kind: Deliver, Src: t.src, Dst: t.dst, Lane: t.lane, Size: len(t.data), Label: t.label})
	return d.recv
}

// Cut partitions a and b: what is in flight between them is dropped, and
// sends between them fail with ErrPartitioned until Heal.
func (n *Net) Cut(a, b string) {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.settleLocked()
	n.cuts[normPair(a, b)] = true
	n.trace = append(n.trace, Event{At: time.Since(n.start), Kind: CutEv, Src: a, Dst: b})
	n.dropLocked(func(t *transfer) bool { return normPair(t.src, t.dst) == normPair(a, b) }, "partitioned")
}

// Heal ends a partition of a and b.
func (n *Net) Heal(a, b string) {
	n.mu.Lock()
	defer n.mu.Unlock()
	delete(n.cuts, normPair(a, b))
	n.trace = append(n.trace, Event{At: time.Since(n.start), Kind: HealEv, Src: a, Dst: b})
}

// Kill ends an endpoint as a crash does: what is in flight to and from it
// is dropped, its sends fail with ErrClosed and sends to it with
// ErrUnknownEndpoint, and every endpoint it exchanged messages with is
// told (OnPeerDown), on the caller's goroutine. Its name may be attached
// again.
func (n *Net) Kill(name string) {
	n.mu.Lock()
	e := n.eps[name]
	if e == nil || e.dead {
		n.mu.Unlock()
		return
	}
	n.settleLocked()
	e.dead = true
	n.trace = append(n.trace, Event{At: time.Since(n.start), Kind: KillEv, Src: name})
	n.dropLocked(func(t *transfer) bool { return t.src == name || t.dst == name }, "killed")
	var tell []func(string)
	for _, c := range slices.Sorted(mapKeys(e.contacts)) {
		if p := n.eps[c]; p != nil && !p.dead && p.onDown != nil {
			tell = append(tell, p.onDown)
		}
	}
	n.mu.Unlock()
	for _, f := range tell {
		f(name)
	}
}

// Leave detaches e without telling anyone (an orderly exit: what it sent
// is still delivered; what is sent to it is refused).
func (e *Endpoint) Leave() {
	n := e.n
	n.mu.Lock()
	defer n.mu.Unlock()
	if !e.dead {
		e.dead = true
		n.trace = append(n.trace, Event{At: time.Since(n.start), Kind: LeaveEv, Src: e.name})
	}
}

func mapKeys(m map[string]bool) func(func(string) bool) {
	return func(yield func(string) bool) {
		for k := range m {
			if !yield(k) {
				return
			}
		}
	}
}

// dropLocked drops the queued transfers that match, in due order.
func (n *Net) dropLocked(match func(*transfer) bool, why string) {
	var gone []*transfer
	for _, t := range n.queue {
		if match(t) {
			gone = append(gone, t)
		}
	}
	slices.SortFunc(gone, func(x, y *transfer) int { return int(x.seq) - int(y.seq) })
	at := time.Since(n.start)
	for _, t := range gone {
		heap.Remove(&n.queue, t.index)
		n.releaseLocked(t)
		n.lost++
		n.trace = append(n.trace, Event{At: at, Kind: Drop, Src: t.src, Dst: t.dst, Lane: t.lane, Size: len(t.data), Label: t.label, Note: why})
	}
}

// Trace returns a copy of the events so far.
func (n *Net) Trace() []Event {
	n.mu.Lock()
	defer n.mu.Unlock()
	return slices.Clone(n.trace)
}

// Run starts delivering transfers as they come due, on a goroutine of
// the Net's, until Close. Sends are scheduled as they are made.
func (n *Net) Run() {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.running || n.closed {
		return
	}
	n.running = true
	n.wake = make(chan struct{}, 1)
	n.stop = make(chan struct{})
	n.done = make(chan struct{})
	n.settleLocked()
	go n.pump()
}

func (n *Net) pump() {
	defer close(n.done)
	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	for {
		n.mu.Lock()
		if len(n.queue) > 0 && !n.queue[0].due.After(time.Now()) {
			t := heap.Pop(&n.queue).(*transfer)
			recv := n.takeLocked(t)
			n.mu.Unlock()
			if recv != nil {
				recv(t.src, t.lane, t.data)
			}
			continue
		}
		wait := time.Hour
		if len(n.queue) > 0 {
			wait = time.Until(n.queue[0].due)
		}
		n.mu.Unlock()
		timer.Reset(wait)
		select {
		case <-timer.C:
		case <-n.wake:
			timer.Stop()
		case <-n.stop:
			return
		}
	}
}

// Close stops the pump (if Run started one) and refuses every later
// send. What is still in flight is never delivered.
func (n *Net) Close() {
	n.mu.Lock()
	if n.closed {
		n.mu.Unlock()
		return
	}
	n.closed = true
	running := n.running
	n.mu.Unlock()
	if running {
		close(n.stop)
		<-n.done
	}
}

// transferHeap orders transfers by due time, then by the order they were
// scheduled in.
type transferHeap []*transfer

func (h transferHeap) Len() int { return len(h) }
func (h transferHeap) Less(i, j int) bool {
	if !h[i].due.Equal(h[j].due) {
		return h[i].due.Before(h[j].due)
	}
	return h[i].seq < h[j].seq
}
func (h transferHeap) Swap(i, j int) {
	h[i], h[j] = h[j], h[i]
	h[i].index, h[j].index = i, j
}
func (h *transferHeap) Push(x any) {
	t := x.(*transfer)
	t.index = len(*h)
	*h = append(*h, t)
}
func (h *transferHeap) Pop() any {
	old := *h
	t := old[len(old)-1]
	old[len(old)-1] = nil
	*h = old[:len(old)-1]
	t.index = -1
	return t
}

// Reachable is nil when a can send to b now: b lives and no partition
// separates them; otherwise the error a send would fail with.
func (n *Net) Reachable(a, b string) error {
	n.mu.Lock()
	defer n.mu.Unlock()
	e := n.eps[a]
	if e == nil {
		return ErrUnknownEndpoint
	}
	return n.refusalLocked(e, b)
}

// Mark adds an event of the caller's to the trace (Kind Note), at the
// current virtual time: a harness records what its nodes did beside what
// the fabric carried, so that a replay compares both.
func (n *Net) Mark(who, note string) {
	n.mu.Lock()
	n.trace = append(n.trace, Event{At: time.Since(n.start), Kind: NoteEv, Src: who, Note: note})
	n.mu.Unlock()
}

// Lost is the number of transfers lost or dropped after the fabric
// accepted them: their senders were told nothing.
func (n *Net) Lost() int {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.lost
}
