package streaming

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
)

// The messenger mux (docs/mux.md): every stream to a peer is a slot on
// the messenger connection that already exists to that peer, and records
// of many streams share one _stream_batch active message.
//
// It lives in package streaming, not in a package of its own, because it
// feeds the anchor's inlet directly (the book's direct feed: no goroutine
// between the slot buffer and the consumer) and backs the same Sender
// type; a separate package would have to export both. Its wire codec is
// the leaf package internal/muxwire.
//
// Goroutines: one per batcher (one per peer and lane) and one sweeper per
// Manager for credit doorbells, the periodic credit walk, the stream
// watchdog and idle batcher eviction. None per stream, none per record.

// muxCounters are the mux's own counts, read by tests and the metrics
// scrape.
type muxCounters struct {
	batchesSent, recordsSent   atomic.Uint64
	batchesRecv, recordsRecv   atomic.Uint64
	creditExhausted            atomic.Uint64
	controlRefused             atomic.Uint64
	epochDeaths                atomic.Uint64
	generationMismatch         atomic.Uint64
	protocolErrors             atomic.Uint64
	watchdogFirings            atomic.Uint64
	readerStall, creditLost    atomic.Uint64 // must stay 0
	producerBackpressure       atomic.Uint64
	creditSent, creditReceived atomic.Uint64
	creditReposted             atomic.Uint64 // credit of a refused batch, owed again
	sentByType                 [metrics.NumMuxRecordTypes]atomic.Uint64
	dropped                    [metrics.NumMuxDropReasons]atomic.Uint64
	unclaimedReaped            atomic.Uint64
	drainVisits                atomic.Uint64
	batchSeqGaps               atomic.Uint64
	batcherWakes               atomic.Uint64 // wakes of the batcher goroutines
	holdOverflow               atomic.Uint64 // slots ended because their hold overflowed
	repliesDiscarded           atomic.Uint64 // replies owed to a peer that could not be reached, dropped
	singletons                 atomic.Uint64 // records sent alone as a staged batch
}

// mux is the messenger mux of one Manager.
type mux struct {
	m   *Manager
	met *metrics.MuxMetrics // nil: no Prometheus
	// unreport stops the metrics scrape reading this mux; nil without one.
	unreport func()
	cfg      MuxConfig
	// epochs is the last epoch a batcher took: it starts at a random base
	// (randomEpochBase) and only moves forward.
	epochs atomic.Uint64
	// post writes one batch to peer on lane. A seam for tests; NewNodeManager
	// sets it to a messenger Post.
	post func(peer ext.WorkerID, lane int, batch []byte) error
	// probePost is post that does not wait for admission, for the health
	// check, which runs on the sweeper shared by every peer; nil: post.
	probePost func(peer ext.WorkerID, lane int, batch []byte) error
	// postOwned is post for a batch in a pooled buffer that owner keeps
	// alive (no copy); nil: the batchers allocate a buffer per batch.
	postOwned func(peer ext.WorkerID, lane int, batch []byte, owner ext.Owner) error
	// postTagged is post with a _mux_slot header; nil: post.
	postTagged func(peer ext.WorkerID, lane int, batch []byte, tag string) error
	// routable says whether this node can write to peer at all (the
	// messenger has a route to it); nil: every peer is. Only a routable
	// peer gets an ingress table or a batcher: a stranger's batch gets
	// nothing made for it (mux_hostile.go).
	routable func(peer ext.WorkerID) bool
	// walks counts the credit walks: a pending attach's age is measured
	// in them, so an attach reads no clock (mux_pipeline.go).
	walks atomic.Uint64
	// stagesAbove is the messenger's staging threshold (0: it stages
	// nothing), to count the batches it stages.
	stagesAbove int
	// heartbeat is the window of the stream watchdog.
	heartbeat time.Duration
	// log takes the stream watchdog's warning; nil: slog.Default().
	log *slog.Logger
	// watchdogWarn rate-limits that warning: a congested peer link can
	// end thousands of streams in one window (mux_watchdog.go).
	watchdogWarn logLimiter

	mu       sync.Mutex
	batchers map[laneKey]*batcher
	ingress  map[laneKey]*ingressPeer
	binds    map[bindKey]*muxBind
	bindIDs  map[uint64]*muxBind // the same binds by their accept-window id
	nextBind uint64
	acceptQ  *deadline.Queue            // the accept windows of every bind
	nodeLoad laneLoad                   // streams per lane on this node (mux_lanes.go)
	peerLoad map[ext.WorkerID]*laneLoad // streams per lane from each sender
	budgetMu sync.Mutex                 // a leaf: budgets is read while batchers are made, with or without mu
	budgets  map[ext.WorkerID]*peerBudget
	closed   bool
	// retired holds, once closed, the batchers close stopped (those its
	// goodbyes made too): a close answered after that goes through its
	// lane's batcher, in the epoch that batcher's last batches used.
	retired map[laneKey]*batcher

	bell chan struct{} // cap 1: a consumer drained a slot of a peer whose visit floor has passed
	stop chan struct{}
	// The doorbell's floor timer (ringAt): it fires when the visit floor
	// of a peer with drained slots ends; floorAt is when, zero while it is
	// not set. floorMu is a leaf.
	floorMu  sync.Mutex
	floorT   *time.Timer
	floorAt  time.Time
	sweeping sync.WaitGroup
	n        muxCounters
}

func newMux(cfg MuxConfig, heartbeat time.Duration, post func(ext.WorkerID, int, []byte) error) *mux {
	mx := &mux{
		cfg: cfg.withDefaults(), post: post, heartbeat: heartbeat,
		batchers: make(map[laneKey]*batcher),
		ingress:  make(map[laneKey]*ingressPeer),
		binds:    make(map[bindKey]*muxBind),
		bindIDs:  make(map[uint64]*muxBind),
		peerLoad: make(map[ext.WorkerID]*laneLoad),
		budgets:  make(map[ext.WorkerID]*peerBudget),
		bell:     make(chan struct{}, 1),
		stop:     make(chan struct{}),
		floorT:   time.NewTimer(time.Hour),
	}
	mx.floorT.Stop()
	mx.epochs.Store(randomEpochBase())
	mx.acceptQ = deadline.New(0, mx.expireBind)
	mx.sweeping.Add(1)
	go mx.sweep()
	return mx
}

// laneKey names one (peer, lane): everything that depends on order is
// kept per laneKey, on both sides.
type laneKey struct {
	peer ext.WorkerID
	lane int
}

// batcherFor returns the batcher to peer on lane, making it on first use.
func (mx *mux) batcherFor(peer ext.WorkerID, lane int) (*batcher, error) {
	mx.mu.Lock()
	defer mx.mu.Unlock()
	if mx.closed {
		return nil, ErrCancelled
	}
	k := laneKey{peer, lane}
	b := mx.batchers[k]
	if b == nil {
		b = newBatcher(mx, peer, lane)
		mx.batchers[k] = b
	}
	return b, nil
}

// supersede marks a batcher that eviction or peer loss (lost) took out
// of the mux: a successor may write on its lane from now on. The caller
// holds mx.mu (a batcher's lock nests in it).
func (b *batcher) supersede(lost bool) {
	b.mu.Lock()
	if lost {
		b.state.to(batcherLost)
	} else {
		b.state.to(batcherSuperseded)
	}
	b.mu.Unlock()
}

// supersedeIfIdle is supersede for eviction, in the same hold of b.mu as
// the idle check: an attach that opens a slot in between would otherwise
// land on a batcher about to stop. The caller holds mx.mu.
func (b *batcher) supersedeIfIdle(now time.Time, ttl time.Duration) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	if !b.idleLocked(now, ttl) {
		return false
	}
	b.state.to(batcherSuperseded)
	return true
}

// existingBatcher returns the batcher to peer on lane, or nil.
func (mx *mux) existingBatcher(peer ext.WorkerID, lane int) *batcher {
	mx.mu.Lock()
	defer mx.mu.Unlock()
	return mx.batchers[laneKey{peer, lane}]
}

// FlushBatch kicks every batcher: under FlushManual it is the write; under
// FlushAuto it forces one. It never blocks and never fails.
func (mx *mux) flushAll() {
	mx.mu.Lock()
	bs := make([]*batcher, 0, len(mx.batchers))
	for _, b := range mx.batchers {
		bs = append(bs, b)
	}
	mx.mu.Unlock()
	for _, b := range bs {
		b.kick()
	}
}

// peerLost is epoch death for everything to and from peer: its batcher's
// slots close (producers see cancel), and its ingress slots end with
// Dropped.
func (mx *mux) peerLost(peer ext.WorkerID) {
	mx.mu.Lock()
	var bs []*batcher
	var ips []*ingressPeer
	for k, b := range mx.batchers {
		if k.peer == peer {
			delete(mx.batchers, k)
			b.supersede(true)
			bs = append(bs, b)
		}
	}
	for k, ip := range mx.ingress {
		if k.peer == peer {
			delete(mx.ingress, k)
			ips = append(ips, ip)
		}
	}
	if len(bs) > 0 {
		// Counted under the lock, before close can start waiting.
		mx.sweeping.Add(1)
	}
	mx.mu.Unlock()
	// Its budget goes with it: a node that meets many peers over its life
	// keeps none for the ones it lost.
	mx.budgetMu.Lock()
	delete(mx.budgets, peer)
	mx.budgetMu.Unlock()
	if len(bs) > 0 {
		// stop waits for each batcher's goroutine, which may be posting;
		// close waits for this one.
		go func() {
			defer mx.sweeping.Done()
			for _, b := range bs {
				b.stop()
			}
		}()
	}
	for _, ip := range ips {
		ip.retireAll()
	}
}

// close stops the batchers and the sweeper, and ends every mux stream.
func (mx *mux) close() {
	mx.mu.Lock()
	if mx.closed {
		mx.mu.Unlock()
		return
	}
	mx.closed = true
	bs, ips := mx.batchers, mx.ingress
	mx.batchers, mx.ingress = map[laneKey]*batcher{}, map[laneKey]*ingressPeer{}
	for k := range ips {
		if bs[k] == nil {
			bs[k] = newBatcher(mx, k.peer, k.lane) // the goodbye's writer
		}
	}
	for _, b := range bs {
		b.mu.Lock() // a batcher's lock nests in the mux's
		b.state.to(batcherRetired)
		b.mu.Unlock()
	}
	mx.retired = maps.Clone(bs) // retiredFor adds to it while close walks bs
	binds := mx.binds
	mx.binds = map[bindKey]*muxBind{}
	mx.bindIDs = map[uint64]*muxBind{}
	mx.mu.Unlock()
	mx.goodbyes(bs, ips)
	close(mx.stop)
	for _, b := range bs {
		b.stop()
	}
	for _, ip := range ips {
		ip.retireAll()
	}
	for _, bd := range binds {
		bd.drop()
	}
	mx.sweeping.Wait()
	mx.acceptQ.Close()
	if mx.unreport != nil {
		mx.unreport() // its counts stay in the totals; its gauges go
	}
}

// goodbyes tells every peer, while the messenger may still carry it, that
// this node's mux streams end: without it a peer whose connection stays up
// learns only from its stream watchdog, three heartbeat windows later. bs
// has a batcher for every lane of ips.
func (mx *mux) goodbyes(bs map[laneKey]*batcher, ips map[laneKey]*ingressPeer) {
	for k, b := range bs {
		var theirs []muxwire.SlotID
		if ip := ips[k]; ip != nil {
			theirs = ip.liveIDs()
		}
		b.goodbye(theirs)
	}
}

// send posts one batch and, once the transport took it, counts it: its
// records by type and its size for records_per_batch. Walking the record
// headers costs a few nanoseconds per record, once per batch.
func (mx *mux) send(peer ext.WorkerID, lane int, batch []byte) error {
	return mx.sendTagged(peer, lane, batch, "")
}

// sendTagged is send for a batch that may be staged: tag, when set, goes
// as its _mux_slot header.
func (mx *mux) sendTagged(peer ext.WorkerID, lane int, batch []byte, tag string) error {
	return mx.sendOwned(peer, lane, batch, tag, nil)
}

// sendOwned is sendTagged for a batch in ob's pooled buffer (nil: none).
// A tagged batch may be staged, and staging keeps the bytes past the
// call: it goes by the copying path, and its buffer leaves the pool.
func (mx *mux) sendOwned(peer ext.WorkerID, lane int, batch []byte, tag string, ob *batchBuf) error {
	var err error
	switch {
	case tag != "":
		if ob != nil {
			ob.keep = true
		}
		if mx.postTagged != nil {
			err = mx.postTagged(peer, lane, batch, tag)
		} else {
			err = mx.post(peer, lane, batch)
		}
	case ob != nil && mx.postOwned != nil && (mx.stagesAbove <= 0 || len(batch) <= mx.stagesAbove):
		err = mx.postOwned(peer, lane, batch, ob)
	default:
		err = mx.post(peer, lane, batch)
	}
	if err != nil {
		return err
	}
	if tag != "" && mx.stagesAbove > 0 && len(batch) > mx.stagesAbove {
		mx.n.singletons.Add(1)
	}
	mx.n.batchesSent.Add(1) // first: a reader of the type counts sees the batch counted
	n := countRecordTypes(batch, &mx.n.sentByType)
	mx.n.recordsSent.Add(uint64(n))
	if mx.met != nil {
		mx.met.BatchSent(n)
	}
	return nil
}

// budgetFor is the byte budget that every lane to peer shares.
func (mx *mux) budgetFor(peer ext.WorkerID) *peerBudget {
	mx.budgetMu.Lock()
	defer mx.budgetMu.Unlock()
	pb := mx.budgets[peer]
	if pb == nil {
		pb = new(peerBudget)
		mx.budgets[peer] = pb
	}
	return pb
}
