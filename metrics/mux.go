package metrics

import (
	"sync"

	"github.com/prometheus/client_golang/prometheus"
)

// The velo_streaming_mux_* series (docs/metrics.md) and the two streaming
// counters that only the mux moves (slot credit exhaustion, unclaimed
// binds reaped).
//
// The mux keeps its own counts in atomics, because it needs them anyway
// (tests, Manager.MuxStats) and because an atomic add is the cheapest
// record there is. This collector reads them at scrape time from every
// mux that reports into it, so the hot path pays nothing for Prometheus.
// Only records_per_batch, a histogram, is observed as batches go: once per
// batch, never per record.

// MuxRecordType indexes the record types of records_sent_total.
type MuxRecordType uint8

// The record types of the mux wire, in their wire order.
const (
	MuxData MuxRecordType = iota
	MuxOpenSlot
	MuxCloseSlot
	MuxCreditUpdate
	MuxSlotHeartbeat
	MuxLifecycleSlot
	NumMuxRecordTypes
)

var muxRecordTypeNames = [NumMuxRecordTypes]string{"data", "open_slot", "close_slot", "credit_update", "slot_heartbeat", "lifecycle_slot"}

// MuxDropReason indexes records_dropped_total.
type MuxDropReason uint8

// Why ingress dropped a record before delivery.
const (
	DropStaleEpoch MuxDropReason = iota
	DropGeneration
	DropUnknownSlot
	DropClosedSlot
	DropLaneMismatch
	DropSlotCollision
	// DropOverCredit: a Data record beyond the credit its slot's consumer
	// granted; the slot ends with ProtocolError.
	DropOverCredit
	// DropEpochJump: a batch that moved its peer's epoch further forward
	// than a mux ever does.
	DropEpochJump
	// DropUnroutable: a batch from a worker this node has no route to, so
	// it could not answer it.
	DropUnroutable
	NumMuxDropReasons
)

var muxDropReasonNames = [NumMuxDropReasons]string{"stale_epoch", "generation", "unknown_slot", "closed_slot", "lane_mismatch", "slot_collision", "over_credit", "epoch_jump", "unroutable"}

// MuxWakeSource indexes batcher_wakes_total: what woke a batcher's
// goroutine. A wake that several signals coalesced into counts once, for
// the first of them in this order.
type MuxWakeSource uint8

// The wake sources, in the order a coalesced wake is attributed.
const (
	// WakeOpen: a producer's open (an OpenSlot to write, or an open the
	// owner admitted).
	WakeOpen MuxWakeSource = iota
	// WakeControl: coalesced control owed to the peer (credit grants taken
	// from it, closes, stops, cancels, refusals, lane jobs). A pass that
	// found the lane's writes held by another writer runs again on a wake
	// of its own, counted as the source of the pass it repeats.
	WakeControl
	// WakeFrame: a record queued on a slot (data, a heartbeat), or a
	// FlushBatch.
	WakeFrame
	// WakeDeparted: a producer that left (its Finalize, Detach or Close
	// queued the slot's terminal record).
	WakeDeparted
	// WakeLinger: a timer (reply_linger, the FlushLinger window, or the
	// retry delay after a refused batch).
	WakeLinger
	NumMuxWakeSources
)

var muxWakeSourceNames = [NumMuxWakeSources]string{"open", "control", "frame", "departed", "linger"}

func (w MuxWakeSource) String() string {
	if w < NumMuxWakeSources {
		return muxWakeSourceNames[w]
	}
	return "unknown"
}

// MuxSnapshot is what one mux reports at a scrape: monotonic counts since
// it started, and its gauges now.
type MuxSnapshot struct {
	BatchesSent, BatchesReceived uint64
	RecordsSent                  [NumMuxRecordTypes]uint64
	RecordsDropped               [NumMuxDropReasons]uint64
	ReaderStall                  uint64
	GenerationMismatch           uint64
	ControlRefused               uint64
	EpochDeaths                  uint64
	CreditLost, CreditReposted   uint64
	BatchSeqGaps                 uint64
	DrainVisits                  uint64
	HoldOverflow                 uint64
	RendezvousSingletons         uint64
	SlotCreditExhausted          uint64
	UnclaimedBindReaped          uint64
	RepliesDiscarded             uint64
	BatcherWakes                 [NumMuxWakeSources]uint64

	LiveSlots       int64
	WithheldRecords int64
	StagedRecords   int64
	HeldRecords     int64
}

// add sums o into s.
func (s *MuxSnapshot) add(o MuxSnapshot) {
	s.BatchesSent += o.BatchesSent
	s.BatchesReceived += o.BatchesReceived
	for i := range s.RecordsSent {
		s.RecordsSent[i] += o.RecordsSent[i]
	}
	for i := range s.RecordsDropped {
		s.RecordsDropped[i] += o.RecordsDropped[i]
	}
	for i := range s.BatcherWakes {
		s.BatcherWakes[i] += o.BatcherWakes[i]
	}
	s.ReaderStall += o.ReaderStall
	s.GenerationMismatch += o.GenerationMismatch
	s.ControlRefused += o.ControlRefused
	s.EpochDeaths += o.EpochDeaths
	s.CreditLost += o.CreditLost
	s.CreditReposted += o.CreditReposted
	s.BatchSeqGaps += o.BatchSeqGaps
	s.DrainVisits += o.DrainVisits
	s.HoldOverflow += o.HoldOverflow
	s.RendezvousSingletons += o.RendezvousSingletons
	s.SlotCreditExhausted += o.SlotCreditExhausted
	s.UnclaimedBindReaped += o.UnclaimedBindReaped
	s.RepliesDiscarded += o.RepliesDiscarded
	s.LiveSlots += o.LiveSlots
	s.WithheldRecords += o.WithheldRecords
	s.StagedRecords += o.StagedRecords
	s.HeldRecords += o.HeldRecords
}

// muxCollector sums the snapshots of every mux that reports into it. A mux
// that stops reporting leaves its final counts behind in retired, so that
// the counters never go down.
type muxCollector struct {
	descs muxDescs

	mu      sync.Mutex
	next    uint64
	sources map[uint64]func() MuxSnapshot
	retired MuxSnapshot // counts of muxes that stopped reporting; gauges zero
}

type muxDescs struct {
	batches, recordsSent, recordsDropped, readerStall, genMismatch *prometheus.Desc
	controlRefused, epochDeaths, creditLost, creditReposted        *prometheus.Desc
	seqGaps, drainVisits, holdOverflow, singletons                 *prometheus.Desc
	creditExhausted, unclaimedReaped, repliesDiscarded, wakes      *prometheus.Desc
	live, withheld, staged, held                                   *prometheus.Desc
}

func newMuxCollector() *muxCollector {
	d := func(name, help string, labels ...string) *prometheus.Desc {
		return prometheus.NewDesc(name, help, labels, nil)
	}
	return &muxCollector{
		sources: make(map[uint64]func() MuxSnapshot),
		descs: muxDescs{
			batches:          d("velo_streaming_mux_batches_total", "_stream_batch active messages packed (sent) or decoded (received) by the mux.", "direction"),
			recordsSent:      d("velo_streaming_mux_records_sent_total", "Mux records a batcher packed for its peer, by record type.", "record_type"),
			recordsDropped:   d("velo_streaming_mux_records_dropped_total", "Mux records discarded by ingress before delivery, by reason.", "reason"),
			readerStall:      d("velo_streaming_mux_reader_stall_total", "Records ingress could not put into room that credit had reserved. Must stay zero."),
			genMismatch:      d("velo_streaming_mux_generation_mismatch_total", "Records dropped because their slot index was live at another generation."),
			controlRefused:   d("velo_streaming_mux_control_refused_total", "Control entries a batcher refused: a slot it never allocated."),
			epochDeaths:      d("velo_streaming_mux_epoch_deaths_total", "Peer epochs that died, each failing every live slot beneath it once."),
			creditLost:       d("velo_streaming_mux_credit_lost_total", "Ingress credit that no batch carried back. Expected to stay zero."),
			creditReposted:   d("velo_streaming_mux_credit_reposted_total", "Ingress credit minted into a discarded batch and handed back for a later one."),
			seqGaps:          d("velo_streaming_mux_batch_seq_gaps_total", "Batches missing between the expected and received batch_seq within one epoch."),
			drainVisits:      d("velo_streaming_mux_drain_visits_total", "Credit reconciles the sweeper ran on a peer because a consumer drained."),
			holdOverflow:     d("velo_streaming_mux_hold_overflow_total", "Slots closed because their ahead-of-sequence hold overflowed."),
			singletons:       d("velo_streaming_mux_rendezvous_singletons_total", "Records above the eager budget, sent alone in their batch."),
			creditExhausted:  d("velo_streaming_slot_credit_exhausted_total", "Times a mux slot ran out of data credit with records waiting."),
			unclaimedReaped:  d("velo_streaming_unclaimed_bind_reaped_total", "Mux binds reaped because no sender claimed them within the accept window."),
			repliesDiscarded: d("velo_streaming_mux_replies_discarded_total", "Replies (credit, closes, stops) owed to a peer that could not be reached, dropped instead of retried."),
			wakes:            d("velo_streaming_mux_batcher_wakes_total", "Wakes of the per-peer batcher goroutines, by what woke them (open, control, frame, departed, linger).", "source"),
			live:             d("velo_streaming_mux_live_slots", "Slots the mux holds state for, both sides. Returns to zero at teardown."),
			withheld:         d("velo_streaming_mux_withheld_records", "Records queued on egress slots that may not be sent yet (no credit)."),
			staged:           d("velo_streaming_mux_staged_records", "Records packed into batches that are open and not yet written."),
			held:             d("velo_streaming_mux_held_records", "Records in per-slot ahead-of-sequence holds."),
		},
	}
}

// add starts reporting fn's snapshots; the returned func stops it and
// keeps its last counts.
func (c *muxCollector) add(fn func() MuxSnapshot) func() {
	c.mu.Lock()
	c.next++
	id := c.next
	c.sources[id] = fn
	c.mu.Unlock()
	return func() {
		last := fn()
		last.LiveSlots, last.WithheldRecords, last.StagedRecords, last.HeldRecords = 0, 0, 0, 0
		c.mu.Lock()
		if _, ok := c.sources[id]; ok {
			delete(c.sources, id)
			c.retired.add(last)
		}
		c.mu.Unlock()
	}
}

func (c *muxCollector) snapshot() MuxSnapshot {
	c.mu.Lock()
	total := c.retired
	fns := make([]func() MuxSnapshot, 0, len(c.sources))
	for _, fn := range c.sources {
		fns = append(fns, fn)
	}
	c.mu.Unlock()
	for _, fn := range fns { // outside the lock: a source takes its own locks
		total.add(fn())
	}
	return total
}

func (c *muxCollector) Describe(ch chan<- *prometheus.Desc) {
	d := &c.descs
	for _, x := range []*prometheus.Desc{d.batches, d.recordsSent, d.recordsDropped, d.readerStall, d.genMismatch,
		d.controlRefused, d.epochDeaths, d.creditLost, d.creditReposted, d.seqGaps, d.drainVisits, d.holdOverflow,
		d.singletons, d.creditExhausted, d.unclaimedReaped, d.repliesDiscarded, d.wakes, d.live, d.withheld, d.staged, d.held} {
		ch <- x
	}
}

func (c *muxCollector) Collect(ch chan<- prometheus.Metric) {
	s := c.snapshot()
	d := &c.descs
	counter := func(desc *prometheus.Desc, v uint64, labels ...string) {
		ch <- prometheus.MustNewConstMetric(desc, prometheus.CounterValue, float64(v), labels...)
	}
	gauge := func(desc *prometheus.Desc, v int64) {
		ch <- prometheus.MustNewConstMetric(desc, prometheus.GaugeValue, float64(v))
	}
	counter(d.batches, s.BatchesSent, "sent")
	counter(d.batches, s.BatchesReceived, "received")
	for i, n := range s.RecordsSent {
		counter(d.recordsSent, n, muxRecordTypeNames[i])
	}
	for i, n := range s.RecordsDropped {
		counter(d.recordsDropped, n, muxDropReasonNames[i])
	}
	for i, n := range s.BatcherWakes {
		counter(d.wakes, n, muxWakeSourceNames[i])
	}
	counter(d.readerStall, s.ReaderStall)
	counter(d.genMismatch, s.GenerationMismatch)
	counter(d.controlRefused, s.ControlRefused)
	counter(d.epochDeaths, s.EpochDeaths)
	counter(d.creditLost, s.CreditLost)
	counter(d.creditReposted, s.CreditReposted)
	counter(d.seqGaps, s.BatchSeqGaps)
	counter(d.drainVisits, s.DrainVisits)
	counter(d.holdOverflow, s.HoldOverflow)
	counter(d.singletons, s.RendezvousSingletons)
	counter(d.creditExhausted, s.SlotCreditExhausted)
	counter(d.unclaimedReaped, s.UnclaimedBindReaped)
	counter(d.repliesDiscarded, s.RepliesDiscarded)
	gauge(d.live, s.LiveSlots)
	gauge(d.withheld, s.WithheldRecords)
	gauge(d.staged, s.StagedRecords)
	gauge(d.held, s.HeldRecords)
}

// MuxMetrics is the handle a mux records into, from VeloMetrics.Mux.
type MuxMetrics struct {
	perBatch  [2]prometheus.Observer // sent, received
	collector *muxCollector
}

// Mux returns the handle of the mux series; nil on a nil VeloMetrics.
func (m *VeloMetrics) Mux() *MuxMetrics {
	if m == nil {
		return nil
	}
	return &MuxMetrics{
		perBatch:  [2]prometheus.Observer{m.muxPerBatch.WithLabelValues("sent"), m.muxPerBatch.WithLabelValues("received")},
		collector: m.muxCollector,
	}
}

// Report makes the scrape read fn; call the returned func when the mux
// stops, and its counts stay in the totals.
func (mm *MuxMetrics) Report(fn func() MuxSnapshot) func() { return mm.collector.add(fn) }

// BatchSent observes the record count of a batch this node wrote.
func (mm *MuxMetrics) BatchSent(records int) { mm.perBatch[0].Observe(float64(records)) }

// BatchReceived observes the record count of a batch this node decoded.
func (mm *MuxMetrics) BatchReceived(records int) { mm.perBatch[1].Observe(float64(records)) }

// muxPerBatchBuckets covers 1 record to a full 60 KiB batch of tokens.
var muxPerBatchBuckets = prometheus.ExponentialBuckets(1, 2, 12)

func newMuxPerBatch() *prometheus.HistogramVec {
	return prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name:    "velo_streaming_mux_records_per_batch",
		Help:    "Records carried by one _stream_batch, by direction.",
		Buckets: muxPerBatchBuckets,
	}, []string{"direction"})
}
