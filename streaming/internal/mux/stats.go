package mux

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

func (mx *Mux) creditExhausted()      { mx.N.CreditExhausted.Add(1) }
func (mx *Mux) controlRefused()       { mx.N.ControlRefused.Add(1) }
func (mx *Mux) epochDeaths()          { mx.N.EpochDeaths.Add(1) }
func (mx *Mux) producerBackpressure() { mx.N.producerBackpressure.Add(1) }

// LiveSlots counts the open slots of every batcher and ingress table.
func (mx *Mux) LiveSlots() (out, in int) {
	mx.Mu.Lock()
	bs := make([]*Batcher, 0, len(mx.Batchers))
	for _, b := range mx.Batchers {
		bs = append(bs, b)
	}
	ips := make([]*IngressPeer, 0, len(mx.Ingress))
	for _, ip := range mx.Ingress {
		ips = append(ips, ip)
	}
	mx.Mu.Unlock()
	for _, b := range bs {
		b.Mu.Lock()
		out += b.live
		b.Mu.Unlock()
	}
	for _, ip := range ips {
		ip.Mu.Lock()
		in += ip.Live
		ip.Mu.Unlock()
	}
	return out, in
}

// WireKey is the transport key this build's mux answers attaches with.
const WireKey = muxwire.TransportKey

// Snapshot is what the metrics scrape reads: the counts, and the gauges
// computed now (live slots, records waiting in slot queues).
func (mx *Mux) Snapshot() metrics.MuxSnapshot {
	n := &mx.N
	s := metrics.MuxSnapshot{
		BatchesSent: n.BatchesSent.Load(), BatchesReceived: n.BatchesRecv.Load(),
		ReaderStall: n.ReaderStall.Load(), GenerationMismatch: n.generationMismatch.Load(),
		ControlRefused: n.ControlRefused.Load(), EpochDeaths: n.EpochDeaths.Load(),
		CreditLost: n.CreditLost.Load(), CreditReposted: n.CreditReposted.Load(),
		DrainVisits: n.DrainVisits.Load(), SlotCreditExhausted: n.CreditExhausted.Load(),
		UnclaimedBindReaped: n.UnclaimedReaped.Load(), BatchSeqGaps: n.BatchSeqGaps.Load(),
		HoldOverflow: n.HoldOverflow.Load(), HeldRecords: int64(mx.HeldRecords()),
		RendezvousSingletons: n.Singletons.Load(), RepliesDiscarded: n.RepliesDiscarded.Load(),
	}
	for i := range s.RecordsSent {
		s.RecordsSent[i] = n.SentByType[i].Load()
	}
	for i := range s.RecordsDropped {
		s.RecordsDropped[i] = n.Dropped[i].Load()
	}
	for i := range s.BatcherWakes {
		s.BatcherWakes[i] = n.WakesBy[i].Load()
	}
	out, in := mx.LiveSlots()
	s.LiveSlots = int64(out + in)
	s.WithheldRecords = int64(mx.QueuedRecords())
	return s
}

// QueuedRecords counts the records waiting in this node's slot queues
// (the inlet and the withheld queue are one queue here).
func (mx *Mux) QueuedRecords() int {
	n := 0
	for _, b := range mx.AllBatchers() {
		b.Mu.Lock()
		for _, s := range b.slots {
			if s != nil {
				n += len(s.Q)
			}
		}
		b.Mu.Unlock()
	}
	return n
}

// HeldRecords counts the records waiting in slot holds.
func (mx *Mux) HeldRecords() int {
	n := 0
	for _, ip := range mx.ingressTables() {
		ip.Mu.Lock()
		n += ip.held
		ip.Mu.Unlock()
	}
	return n
}

func (mx *Mux) ingressTables() []*IngressPeer {
	mx.Mu.Lock()
	defer mx.Mu.Unlock()
	ips := make([]*IngressPeer, 0, len(mx.Ingress))
	for _, ip := range mx.Ingress {
		ips = append(ips, ip)
	}
	return ips
}
