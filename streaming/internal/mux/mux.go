package mux

import (
	"log/slog"
	"maps"
	"sync"
	"sync/atomic"
	"time"

	"github.com/velo-go/velo/ext"
	"github.com/velo-go/velo/internal/deadline"
	"github.com/velo-go/velo/internal/muxwire"
	"github.com/velo-go/velo/metrics"
	"github.com/velo-go/velo/streaming/internal/streamerr"
)

// The Mux type: its tables, its counters, and how a batch is posted.

// muxCounters are the mux's own counts, read by tests and the metrics
// scrape.
type muxCounters struct {
	BatchesSent, RecordsSent   atomic.Uint64
	BatchesRecv, RecordsRecv   atomic.Uint64
	CreditExhausted            atomic.Uint64
	ControlRefused             atomic.Uint64
	EpochDeaths                atomic.Uint64
	generationMismatch         atomic.Uint64
	ProtocolErrors             atomic.Uint64
	WatchdogFirings            atomic.Uint64
	ReaderStall, CreditLost    atomic.Uint64 // must stay 0
	producerBackpressure       atomic.Uint64
	CreditSent, CreditReceived atomic.Uint64
	CreditReposted             atomic.Uint64 // credit of a refused batch, owed again
	SentByType                 [metrics.NumMuxRecordTypes]atomic.Uint64
	Dropped                    [metrics.NumMuxDropReasons]atomic.Uint64
	UnclaimedReaped            atomic.Uint64
	DrainVisits                atomic.Uint64
	FloorFires                 atomic.Uint64 // the doorbell's floor timer woke the sweeper
	BatchSeqGaps               atomic.Uint64
	BatcherWakes               atomic.Uint64                            // wakes of the batcher goroutines
	WakesBy                    [metrics.NumMuxWakeSources]atomic.Uint64 // the same wakes, by source (wake.go)
	InlineFlushes              atomic.Uint64                            // FlushBatch calls that wrote on the caller's goroutine (inline.go)
	HoldOverflow               atomic.Uint64                            // slots ended because their hold overflowed
	RepliesDiscarded           atomic.Uint64                            // replies owed to a peer that could not be reached, dropped
	Singletons                 atomic.Uint64                            // records sent alone as a staged batch
}

// Mux is the messenger mux of one Manager.
type Mux struct {
	Met *metrics.MuxMetrics // nil: no Prometheus
	// OpsMet counts the operations of this mux's producers (nil: no
	// metrics); the Manager's, which the mux does not otherwise know.
	OpsMet *metrics.StreamingMetrics
	// Unreport stops the metrics scrape reading this mux; nil without one.
	Unreport func()
	Cfg      Config
	// Epochs is the last epoch a batcher took: it starts at a random base
	// (randomEpochBase) and only moves forward.
	Epochs atomic.Uint64
	// Post writes one batch to peer on lane. A seam for tests; NewNodeManager
	// sets it to a messenger Post.
	Post func(peer ext.WorkerID, lane int, batch []byte) error
	// ProbePost is post that does not wait for admission, for the health
	// check, which runs on the sweeper shared by every peer; nil: post.
	ProbePost func(peer ext.WorkerID, lane int, batch []byte) error
	// PostOwned is post for a batch in a pooled buffer that owner keeps
	// alive (no copy); nil: the batchers allocate a buffer per batch.
	PostOwned func(peer ext.WorkerID, lane int, batch []byte, owner ext.Owner) error
	// PostTagged is post with a _mux_slot header; nil: post.
	PostTagged func(peer ext.WorkerID, lane int, batch []byte, tag string) error
	// PostOwnedNoWait is PostOwned that does not wait for admission: a
	// batch parked in the transport's admission gate comes back as its
	// pending admission. FlushBatch writes inline with it (inline.go); nil:
	// FlushBatch wakes the batcher's goroutine instead.
	PostOwnedNoWait func(peer ext.WorkerID, lane int, batch []byte, owner ext.Owner) (*ext.Admission, error)
	// AbandonCall gives up on the attach request that token names
	// (msgrx.AbandonToken); nil: there is none to give up on.
	AbandonCall func(token uint64, err error) bool
	// Routable says whether this node can write to peer at all (the
	// messenger has a route to it); nil: every peer is. Only a routable
	// peer gets an ingress table or a batcher: a stranger's batch gets
	// nothing made for it (hostile.go).
	Routable func(peer ext.WorkerID) bool
	// walks counts the credit walks: a pending attach's age is measured
	// in them, so an attach reads no clock (pending.go).
	walks atomic.Uint64
	// StagesAbove is the messenger's staging threshold (0: it stages
	// nothing), to count the batches it stages.
	StagesAbove int
	// heartbeat is the window of the stream watchdog.
	heartbeat time.Duration
	// Log takes the stream watchdog's warning; nil: slog.Default().
	Log *slog.Logger
	// watchdogWarn rate-limits that warning: a congested peer link can
	// end thousands of streams in one window (watchdog.go).
	watchdogWarn logLimiter

	Mu       sync.Mutex
	Batchers map[LaneKey]*Batcher
	Ingress  map[LaneKey]*IngressPeer
	binds    map[BindKey]*Bind
	bindIDs  map[uint64]*Bind // the same binds by their accept-window id
	nextBind uint64
	acceptQ  *deadline.Queue            // the accept windows of every bind
	nodeLoad laneLoad                   // streams per lane on this node (lanes.go)
	peerLoad map[ext.WorkerID]*laneLoad // streams per lane from each sender
	BudgetMu sync.Mutex                 // a leaf: budgets is read while batchers are made, with or without mu
	Budgets  map[ext.WorkerID]*peerBudget
	closed   bool
	// retired holds, once closed, the batchers close stopped (those its
	// goodbyes made too): a close answered after that goes through its
	// lane's batcher, in the epoch that batcher's last batches used.
	retired map[LaneKey]*Batcher

	Bell chan struct{} // cap 1: a consumer drained a slot of a peer whose visit floor has passed
	stop chan struct{}
	// The doorbell's floor timer (ringAt): it fires when the visit floor
	// of a peer with drained slots ends; floorAt is when, zero while it is
	// not set. floorMu is a leaf.
	FloorMu sync.Mutex
	floorT  *time.Timer
	FloorAt time.Time
	// floors holds the end of the floor of each peer the timer waits for
	// (armFloor), so that a visit can take its own off (visitedFloor).
	floors   map[*IngressPeer]time.Time
	sweeping sync.WaitGroup
	N        muxCounters
}

func New(cfg Config, heartbeat time.Duration, post func(ext.WorkerID, int, []byte) error) *Mux {
	mx := &Mux{
		Cfg: cfg.WithDefaults(), Post: post, heartbeat: heartbeat,
		Batchers: make(map[LaneKey]*Batcher),
		Ingress:  make(map[LaneKey]*IngressPeer),
		binds:    make(map[BindKey]*Bind),
		bindIDs:  make(map[uint64]*Bind),
		peerLoad: make(map[ext.WorkerID]*laneLoad),
		Budgets:  make(map[ext.WorkerID]*peerBudget),
		Bell:     make(chan struct{}, 1),
		stop:     make(chan struct{}),
		floorT:   time.NewTimer(time.Hour),
		floors:   make(map[*IngressPeer]time.Time),
	}
	mx.floorT.Stop()
	mx.Epochs.Store(randomEpochBase())
	mx.acceptQ = deadline.New(0, mx.expireBind)
	mx.sweeping.Add(1)
	go mx.sweep()
	return mx
}

// LaneKey names one (peer, lane): everything that depends on order is
// kept per LaneKey, on both sides.
type LaneKey struct {
	Peer ext.WorkerID
	Lane int
}

// BatcherFor returns the batcher to peer on lane, making it on first use.
func (mx *Mux) BatcherFor(peer ext.WorkerID, lane int) (*Batcher, error) {
	mx.Mu.Lock()
	defer mx.Mu.Unlock()
	if mx.closed {
		return nil, streamerr.ErrCancelled
	}
	k := LaneKey{peer, lane}
	b := mx.Batchers[k]
	if b == nil {
		b = newBatcher(mx, peer, lane)
		mx.Batchers[k] = b
	}
	return b, nil
}

// Supersede marks a batcher that eviction or peer loss (lost) took out
// of the mux: a successor may write on its lane from now on. The caller
// holds mx.mu (a batcher's lock nests in it).
func (b *Batcher) Supersede(lost bool) {
	b.Mu.Lock()
	if lost {
		b.State.To(BatcherLost)
	} else {
		b.State.To(BatcherSuperseded)
	}
	b.Mu.Unlock()
}

// supersedeIfIdle is supersede for eviction, in the same hold of b.mu as
// the idle check: an attach that opens a slot in between would otherwise
// land on a batcher about to stop. The caller holds mx.mu.
func (b *Batcher) supersedeIfIdle(now time.Time, ttl time.Duration) bool {
	b.Mu.Lock()
	defer b.Mu.Unlock()
	if !b.IdleLocked(now, ttl) {
		return false
	}
	b.State.To(BatcherSuperseded)
	return true
}

// ExistingBatcher returns the batcher to peer on lane, or nil.
func (mx *Mux) ExistingBatcher(peer ext.WorkerID, lane int) *Batcher {
	mx.Mu.Lock()
	defer mx.Mu.Unlock()
	return mx.Batchers[LaneKey{peer, lane}]
}

// FlushBatch kicks every batcher: under FlushManual it is the write; under
// FlushAuto it forces one. It never blocks and never fails.
func (mx *Mux) FlushAll() {
	mx.Mu.Lock()
	bs := make([]*Batcher, 0, len(mx.Batchers))
	for _, b := range mx.Batchers {
		bs = append(bs, b)
	}
	mx.Mu.Unlock()
	// Every batcher's pass is released before any is written: an inline
	// write takes a while, and a batcher that a terminal woke meanwhile
	// would otherwise write its pass's terminals without its tokens, and
	// the tokens in a second batch.
	for _, b := range bs {
		b.releasePass()
	}
	for _, b := range bs {
		b.flushNow()
	}
}

// PeerLost is epoch death for everything to and from peer: its batcher's
// slots close (producers see cancel), and its ingress slots end with
// Dropped.
func (mx *Mux) PeerLost(peer ext.WorkerID) {
	mx.Mu.Lock()
	var bs []*Batcher
	var ips []*IngressPeer
	for k, b := range mx.Batchers {
		if k.Peer == peer {
			delete(mx.Batchers, k)
			b.Supersede(true)
			bs = append(bs, b)
		}
	}
	for k, ip := range mx.Ingress {
		if k.Peer == peer {
			delete(mx.Ingress, k)
			ips = append(ips, ip)
			mx.visitedFloor(ip) // nobody visits it any more; FloorMu is a leaf
		}
	}
	if len(bs) > 0 {
		// Counted under the lock, before close can start waiting.
		mx.sweeping.Add(1)
	}
	mx.Mu.Unlock()
	// Its budget goes with it: a node that meets many peers over its life
	// keeps none for the ones it lost.
	mx.BudgetMu.Lock()
	delete(mx.Budgets, peer)
	mx.BudgetMu.Unlock()
	if len(bs) > 0 {
		// stop waits for each batcher's goroutine, which may be posting;
		// close waits for this one.
		go func() {
			defer mx.sweeping.Done()
			for _, b := range bs {
				b.Stop()
			}
		}()
	}
	for _, ip := range ips {
		ip.retireAll()
	}
}

// Close stops the batchers and the sweeper, and ends every mux stream.
func (mx *Mux) Close() {
	mx.Mu.Lock()
	if mx.closed {
		mx.Mu.Unlock()
		return
	}
	mx.closed = true
	bs, ips := mx.Batchers, mx.Ingress
	mx.Batchers, mx.Ingress = map[LaneKey]*Batcher{}, map[LaneKey]*IngressPeer{}
	for k := range ips {
		if bs[k] == nil {
			bs[k] = newBatcher(mx, k.Peer, k.Lane) // the goodbye's writer
		}
	}
	for _, b := range bs {
		b.Mu.Lock() // a batcher's lock nests in the mux's
		b.State.To(BatcherRetired)
		b.Mu.Unlock()
	}
	mx.retired = maps.Clone(bs) // retiredFor adds to it while close walks bs
	binds := mx.binds
	mx.binds = map[BindKey]*Bind{}
	mx.bindIDs = map[uint64]*Bind{}
	mx.Mu.Unlock()
	mx.goodbyes(bs, ips)
	close(mx.stop)
	for _, b := range bs {
		b.Stop()
	}
	for _, ip := range ips {
		ip.retireAll()
	}
	for _, bd := range binds {
		bd.drop()
	}
	mx.sweeping.Wait()
	mx.acceptQ.Close()
	if mx.Unreport != nil {
		mx.Unreport() // its counts stay in the totals; its gauges go
	}
}

// goodbyes tells every peer, while the messenger may still carry it, that
// this node's mux streams end: without it a peer whose connection stays up
// learns only from its stream watchdog, three heartbeat windows later. bs
// has a batcher for every lane of ips.
func (mx *Mux) goodbyes(bs map[LaneKey]*Batcher, ips map[LaneKey]*IngressPeer) {
	for k, b := range bs {
		var theirs []muxwire.SlotID
		if ip := ips[k]; ip != nil {
			theirs = ip.liveIDs()
		}
		b.goodbye(theirs)
	}
}

// sendOwned posts one batch and, once the transport took it, counts it:
// its records by type and its size for records_per_batch (walking the
// record headers costs a few nanoseconds per record, once per batch). tag,
// when set, goes as the batch's _mux_slot header; ob is the batch's pooled
// buffer (nil: none). A tagged batch may be staged, and staging keeps the
// bytes past the call: it goes by the copying path, and its buffer leaves
// the pool.
func (mx *Mux) sendOwned(peer ext.WorkerID, lane int, batch []byte, tag string, ob *batchBuf) error {
	var err error
	switch {
	case tag != "":
		if ob != nil {
			ob.Keep = true
		}
		if mx.PostTagged != nil {
			err = mx.PostTagged(peer, lane, batch, tag)
		} else {
			err = mx.Post(peer, lane, batch)
		}
	case ob != nil && mx.PostOwned != nil && (mx.StagesAbove <= 0 || len(batch) <= mx.StagesAbove):
		err = mx.PostOwned(peer, lane, batch, ob)
	default:
		err = mx.Post(peer, lane, batch)
	}
	if err != nil {
		return err
	}
	mx.countSent(batch, tag)
	return nil
}

// countSent counts a batch the transport took.
func (mx *Mux) countSent(batch []byte, tag string) {
	if tag != "" && mx.StagesAbove > 0 && len(batch) > mx.StagesAbove {
		mx.N.Singletons.Add(1)
	}
	mx.N.BatchesSent.Add(1) // first: a reader of the type counts sees the batch counted
	n := countRecordTypes(batch, &mx.N.SentByType)
	mx.N.RecordsSent.Add(uint64(n))
	if mx.Met != nil {
		mx.Met.BatchSent(n)
	}
}

// budgetFor is the byte budget that every lane to peer shares.
func (mx *Mux) budgetFor(peer ext.WorkerID) *peerBudget {
	mx.BudgetMu.Lock()
	defer mx.BudgetMu.Unlock()
	pb := mx.Budgets[peer]
	if pb == nil {
		pb = new(peerBudget)
		mx.Budgets[peer] = pb
	}
	return pb
}
