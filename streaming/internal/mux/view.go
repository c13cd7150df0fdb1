package mux

import (
	"sort"

	"github.com/velo-go/velo/ext"
)

// What a debug view reads of the mux: per peer, its batchers (egress),
// its ingress tables and its byte budget. Each table is read in one short
// hold of its own lock, as the metrics scrape reads them (stats.go); no
// lock is held across tables, so the view is a sample, not an atomic cut.

// BatcherView is one (peer, lane) batcher.
type BatcherView struct {
	Lane      int
	State     string
	Epoch     uint64
	LiveSlots int
	// Withheld counts records pulled from producers and not yet sent
	// (out of credit, or fenced); QueuedBytes their bytes.
	Withheld    int
	QueuedBytes int
	// Credit is the data credit the live slots hold and have not spent;
	// Window the credit they opened with (the most they can hold).
	Credit uint64
	Window uint64
	// Starved counts live slots with records queued and no credit left.
	Starved int
	// PendingAttaches counts pipelined attaches not yet answered.
	PendingAttaches int
}

// IngressView is one (peer, lane) ingress table.
type IngressView struct {
	Lane      int
	Epoch     uint64
	LiveSlots int
	// HeldRecords wait in ahead-of-sequence holds.
	HeldRecords int
	// Credit is the data credit the peer's producers hold on these
	// slots, as this side counts it.
	Credit uint64
}

// PeerView is the mux's state for one peer.
type PeerView struct {
	Peer     ext.WorkerID
	Batchers []BatcherView
	Ingress  []IngressView
	// BudgetBytes is what the peer's batchers have queued against the
	// peer's byte budget (BudgetLimit); HoldBytes what its slots' holds
	// keep on the ingress side.
	BudgetBytes int64
	BudgetLimit int
	HoldBytes   int64
}

// View reads the mux's state, per peer, in worker order.
func (mx *Mux) View() []PeerView {
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
	by := map[ext.WorkerID]*PeerView{}
	get := func(w ext.WorkerID) *PeerView {
		v := by[w]
		if v == nil {
			v = &PeerView{Peer: w, BudgetLimit: mx.Cfg.PeerByteBudget}
			by[w] = v
		}
		return v
	}
	for _, b := range bs {
		v := get(b.peer)
		v.Batchers = append(v.Batchers, b.view())
	}
	for _, ip := range ips {
		v := get(ip.peer)
		v.Ingress = append(v.Ingress, ip.view())
	}
	mx.BudgetMu.Lock()
	for w, pb := range mx.Budgets {
		if v := by[w]; v != nil {
			v.BudgetBytes, v.HoldBytes = pb.bytes.Load(), pb.Hold.Load()
		}
	}
	mx.BudgetMu.Unlock()
	out := make([]PeerView, 0, len(by))
	for _, v := range by {
		sort.Slice(v.Batchers, func(i, j int) bool { return v.Batchers[i].Lane < v.Batchers[j].Lane })
		sort.Slice(v.Ingress, func(i, j int) bool { return v.Ingress[i].Lane < v.Ingress[j].Lane })
		out = append(out, *v)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Peer < out[j].Peer })
	return out
}

func (b *Batcher) view() BatcherView {
	b.Mu.Lock()
	defer b.Mu.Unlock()
	v := BatcherView{
		Lane: b.Lane, State: b.State.String(), Epoch: b.Epoch, LiveSlots: b.live,
		QueuedBytes: b.qBytes, PendingAttaches: b.pendingN,
	}
	for _, s := range b.slots {
		if s == nil {
			continue
		}
		v.Withheld += len(s.Q)
		v.Credit += uint64(s.Credit)
		v.Window += uint64(s.window)
		if s.Credit == 0 && len(s.Q) > 0 {
			v.Starved++
		}
	}
	return v
}

func (ip *IngressPeer) view() IngressView {
	ip.Mu.Lock()
	defer ip.Mu.Unlock()
	v := IngressView{Lane: ip.lane, Epoch: ip.Epoch, LiveSlots: ip.Live, HeldRecords: ip.held}
	for _, s := range ip.Slots {
		if s != nil {
			v.Credit += uint64(s.Held)
		}
	}
	return v
}
