package streaming

// The mux's counts: records by type, live slots, the metrics snapshot
// and the queued and held records a scrape reads.

import (
	"encoding/binary"
	"sync/atomic"

	"github.com/velo-go/velo/internal/muxwire"
	"github.com/velo-go/velo/metrics"
)

// countRecordTypes adds the records of an encoded batch to by, by type,
// and returns how many there are. The batch is one this node encoded.
func countRecordTypes(batch []byte, by *[metrics.NumMuxRecordTypes]atomic.Uint64) int {
	var local [metrics.NumMuxRecordTypes]uint64
	n := 0
	for off := muxwire.BatchHeaderLen; off+muxwire.RecordHeaderLen <= len(batch); n++ {
		t := batch[off]
		body := int(binary.BigEndian.Uint32(batch[off+9:]))
		if int(t) < len(local) {
			local[t]++
		}
		off += muxwire.RecordHeaderLen + body
	}
	for i, v := range local {
		if v > 0 {
			by[i].Add(v)
		}
	}
	return n
}

func (mx *mux) creditExhausted()      { mx.n.creditExhausted.Add(1) }
func (mx *mux) controlRefused()       { mx.n.controlRefused.Add(1) }
func (mx *mux) epochDeaths()          { mx.n.epochDeaths.Add(1) }
func (mx *mux) producerBackpressure() { mx.n.producerBackpressure.Add(1) }

// liveSlots counts the open slots of every batcher and ingress table.
func (mx *mux) liveSlots() (out, in int) {
	mx.mu.Lock()
	bs := make([]*batcher, 0, len(mx.batchers))
	for _, b := range mx.batchers {
		bs = append(bs, b)
	}
	ips := make([]*ingressPeer, 0, len(mx.ingress))
	for _, ip := range mx.ingress {
		ips = append(ips, ip)
	}
	mx.mu.Unlock()
	for _, b := range bs {
		b.mu.Lock()
		out += b.live
		b.mu.Unlock()
	}
	for _, ip := range ips {
		ip.mu.Lock()
		in += ip.live
		ip.mu.Unlock()
	}
	return out, in
}

// muxWireKey is the transport key this build's mux answers attaches with.
const muxWireKey = muxwire.TransportKey

// snapshot is what the metrics scrape reads: the counts, and the gauges
// computed now (live slots, records waiting in slot queues).
func (mx *mux) snapshot() metrics.MuxSnapshot {
	n := &mx.n
	s := metrics.MuxSnapshot{
		BatchesSent: n.batchesSent.Load(), BatchesReceived: n.batchesRecv.Load(),
		ReaderStall: n.readerStall.Load(), GenerationMismatch: n.generationMismatch.Load(),
		ControlRefused: n.controlRefused.Load(), EpochDeaths: n.epochDeaths.Load(),
		CreditLost: n.creditLost.Load(), CreditReposted: n.creditReposted.Load(),
		DrainVisits: n.drainVisits.Load(), SlotCreditExhausted: n.creditExhausted.Load(),
		UnclaimedBindReaped: n.unclaimedReaped.Load(), BatchSeqGaps: n.batchSeqGaps.Load(),
		HoldOverflow: n.holdOverflow.Load(), HeldRecords: int64(mx.heldRecords()),
		RendezvousSingletons: n.singletons.Load(), RepliesDiscarded: n.repliesDiscarded.Load(),
	}
	for i := range s.RecordsSent {
		s.RecordsSent[i] = n.sentByType[i].Load()
	}
	for i := range s.RecordsDropped {
		s.RecordsDropped[i] = n.dropped[i].Load()
	}
	out, in := mx.liveSlots()
	s.LiveSlots = int64(out + in)
	s.WithheldRecords = int64(mx.queuedRecords())
	return s
}

// queuedRecords counts the records waiting in this node's slot queues
// (the inlet and the withheld queue are one queue here).
func (mx *mux) queuedRecords() int {
	n := 0
	for _, b := range mx.allBatchers() {
		b.mu.Lock()
		for _, s := range b.slots {
			if s != nil {
				n += len(s.q)
			}
		}
		b.mu.Unlock()
	}
	return n
}

// heldRecords counts the records waiting in slot holds.
func (mx *mux) heldRecords() int {
	n := 0
	for _, ip := range mx.ingressTables() {
		ip.mu.Lock()
		n += ip.held
		ip.mu.Unlock()
	}
	return n
}

func (mx *mux) ingressTables() []*ingressPeer {
	mx.mu.Lock()
	defer mx.mu.Unlock()
	ips := make([]*ingressPeer, 0, len(mx.ingress))
	for _, ip := range mx.ingress {
		ips = append(ips, ip)
	}
	return ips
}
