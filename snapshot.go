package velo

import (
	"bytes"
	"reflect"
	"sort"
	"sync"
	"time"

	"github.com/velo-go/velo/ext"
	"github.com/velo-go/velo/messenger"
	"github.com/velo-go/velo/streaming"
)

// Snapshot is a live view of a node, what DebugHandler serves as JSON and
// `velo inspect` prints: its transports, peers, calls in flight, the
// stream mux per peer, anchors by phase, rendezvous slots and the last
// peer events. Worker ids are 16 hex digits, as ext.WorkerID prints them;
// durations are seconds.
//
// A Snapshot is a sample of a moving node, not an atomic cut: each table
// is read under its own lock, briefly, and none is held while another is
// read. Reading one never stops the node's sends and receives.
type Snapshot struct {
	Instance   string              `json:"instance"`
	Worker     string              `json:"worker"`
	Taken      time.Time           `json:"taken"`
	Transports []TransportSnapshot `json:"transports"`
	Peers      []PeerSnapshot      `json:"peers"`
	Calls      CallsSnapshot       `json:"calls"`
	// Mux is the stream mux's state per peer; empty without a mux or
	// before the first stream over it.
	Mux        []MuxPeerSnapshot  `json:"mux"`
	Anchors    AnchorsSnapshot    `json:"anchors"`
	Rendezvous RendezvousSnapshot `json:"rendezvous"`
	// Events are the last peer events (at most 64), oldest first.
	Events []PeerEventSnapshot `json:"events"`
}

// TransportSnapshot is one of the node's transports. Stats holds the
// counters of a transport with a Stats method (TCP, UDS, QUIC, NATS, ZMQ
// count what they refused or waited for), by field name.
type TransportSnapshot struct {
	Key      string            `json:"key"`
	Priority int               `json:"priority"`
	Stats    map[string]uint64 `json:"stats,omitempty"`
}

// PeerSnapshot is one registered peer.
type PeerSnapshot struct {
	Instance string `json:"instance"`
	Worker   string `json:"worker"`
	// Transports are the node's transports that reach it, highest
	// priority first; Primary carries its messages over Lanes lanes.
	Transports []string `json:"transports"`
	Primary    string   `json:"primary"`
	Lanes      int      `json:"lanes"`
	// LaneStats are the lanes to the peer of each of those transports
	// that reports them, the primary's first (see LaneSnapshot).
	LaneStats []LaneSnapshot `json:"lane_stats,omitempty"`
	// Handshake is "none", "running" or "done".
	Handshake string `json:"handshake"`
	Connected bool   `json:"connected"`
	// ConnectedSince is when the current run of connections began; absent
	// when not connected (or connected before the events kept).
	ConnectedSince *time.Time `json:"connected_since,omitempty"`
	// Self marks the node's own entry: its calls to itself go on it
	// (primary "loopback").
	Self            bool   `json:"self,omitempty"`
	Restarted       bool   `json:"restarted,omitempty"`
	Discovered      bool   `json:"discovered,omitempty"`
	ConnectionsLost uint64 `json:"connections_lost"`
	Handlers        int    `json:"handlers"`
	Undelivered     int64  `json:"undelivered"`
	// InFlight counts this node's calls to the peer waiting for an
	// answer; OldestCallSeconds how long the oldest has been seen waiting
	// (see CallsSnapshot).
	InFlight          int     `json:"in_flight"`
	OldestCallSeconds float64 `json:"oldest_call_s"`
}

// CallsSnapshot counts the calls this node made that wait for an answer,
// and the handlers it runs. The messenger stamps no time on a call, so a
// call's age is measured from the first snapshot of this node that saw it:
// a lower bound, short by at most the time between snapshots (the page
// takes one a second).
type CallsSnapshot struct {
	InFlight          int     `json:"in_flight"`
	OldestCallSeconds float64 `json:"oldest_call_s"`
	RunningHandlers   int64   `json:"running_handlers"`
}

// MuxPeerSnapshot is the stream mux's state for one peer: the batchers
// that send to it and the ingress tables that take its batches, by lane,
// and its byte budget.
type MuxPeerSnapshot struct {
	Worker   string `json:"worker"`
	Instance string `json:"instance,omitempty"`
	// BudgetBytes are queued for the peer against BudgetLimit (the mux's
	// PeerByteBudget); HoldBytes wait in its slots' ingress holds.
	BudgetBytes int64                `json:"budget_bytes"`
	BudgetLimit int                  `json:"budget_limit"`
	HoldBytes   int64                `json:"hold_bytes"`
	Batchers    []MuxBatcherSnapshot `json:"batchers"`
	Ingress     []MuxIngressSnapshot `json:"ingress"`
	LiveSlots   int                  `json:"live_slots"`
}

// MuxBatcherSnapshot is one batcher (peer, lane): the egress side.
// Credit is the data credit its live slots hold unspent, of Window (what
// they opened with); Starved counts live slots with records withheld and
// no credit; Withheld the records taken from producers and not yet sent,
// QueuedBytes their bytes.
type MuxBatcherSnapshot struct {
	Lane            int    `json:"lane"`
	State           string `json:"state"`
	Epoch           uint64 `json:"epoch"`
	LiveSlots       int    `json:"live_slots"`
	Credit          uint64 `json:"credit"`
	Window          uint64 `json:"window"`
	Starved         int    `json:"starved"`
	Withheld        int    `json:"withheld"`
	QueuedBytes     int    `json:"queued_bytes"`
	PendingAttaches int    `json:"pending_attaches"`
}

// MuxIngressSnapshot is one ingress table (peer, lane): the receiving
// side. Credit is what the peer's producers hold on its slots, as this
// side counts it; HeldRecords wait in ahead-of-sequence holds.
type MuxIngressSnapshot struct {
	Lane        int    `json:"lane"`
	Epoch       uint64 `json:"epoch"`
	LiveSlots   int    `json:"live_slots"`
	Credit      uint64 `json:"credit"`
	HeldRecords int    `json:"held_records"`
}

// AnchorsSnapshot counts the node's anchors by phase (unattached,
// attached, stopping, ended, cancelled: streaming.AnchorPhases) and lists
// the oldest (at most OldestAnchorsListed), oldest first. An anchor's age
// is measured as a call's is (CallsSnapshot).
type AnchorsSnapshot struct {
	Total   int              `json:"total"`
	ByPhase map[string]int   `json:"by_phase"`
	Oldest  []AnchorSnapshot `json:"oldest"`
}

// OldestAnchorsListed bounds AnchorsSnapshot.Oldest.
const OldestAnchorsListed = 20

// AnchorSnapshot is one anchor. ID is the low 16 bits of its local id
// only: the full handle lets anyone who has it attach.
type AnchorSnapshot struct {
	ID         string  `json:"id"`
	MPSC       bool    `json:"mpsc,omitempty"`
	Phase      string  `json:"phase"`
	Via        string  `json:"via,omitempty"`
	Queued     int     `json:"queued"`
	Producers  int     `json:"producers,omitempty"`
	AgeSeconds float64 `json:"age_s"`
	// ExpiresInSeconds is the time left of its unattached window, while
	// one runs.
	ExpiresInSeconds *float64 `json:"expires_in_s,omitempty"`
}

// RendezvousSnapshot is what the node stages for peers to pull: slots and
// their bytes, open leases and transfers; Staged and Fetched count
// transparent stagings of request payloads over the node's life.
type RendezvousSnapshot struct {
	Slots     int   `json:"slots"`
	Bytes     int64 `json:"bytes"`
	Leases    int   `json:"leases"`
	Transfers int   `json:"transfers"`
	Staged    int64 `json:"staged"`
	Fetched   int64 `json:"fetched"`
}

// PeerEventSnapshot is one peer event (see PeerEvent).
type PeerEventSnapshot struct {
	At          time.Time `json:"at"`
	Kind        string    `json:"kind"`
	Instance    string    `json:"instance"`
	Worker      string    `json:"worker"`
	NewInstance string    `json:"new_instance,omitempty"`
	Transport   string    `json:"transport,omitempty"`
	Remote      string    `json:"remote,omitempty"`
	Err         string    `json:"err,omitempty"`
}

// nodeView is what snapshots remember between them: when each call and
// anchor was first seen. The zero value is ready.
type nodeView struct {
	mu      sync.Mutex // one snapshot at a time: a bound on their cost
	calls   sightings[messenger.PendingCall]
	anchors sightings[streaming.AnchorHandle]
}

// Snapshot reads the node's live view. Its cost grows with the node's
// peers, calls in flight and anchors (a walk of each, a short lock per
// entry); snapshots of one node run one at a time.
func (n *Node) Snapshot() Snapshot {
	n.view.mu.Lock()
	defer n.view.mu.Unlock()
	now := time.Now()
	s := Snapshot{Instance: n.InstanceID().String(), Worker: n.WorkerID().String(), Taken: now}
	trs := n.m.Transports()
	s.Transports = transportSnapshots(trs)
	s.Peers, s.Calls = n.peerSnapshots(now, laneStatsers(trs))
	s.Mux = n.muxSnapshots(s.Peers)
	s.Anchors = n.anchorSnapshot(now)
	rv := n.Rendezvous.View()
	s.Rendezvous = RendezvousSnapshot{Slots: rv.Slots, Bytes: rv.Bytes, Leases: rv.Leases, Transfers: rv.Transfers, Staged: rv.Staged, Fetched: rv.Fetched}
	s.Events = eventSnapshots(n.m.RecentPeerEvents())
	return s
}

func transportSnapshots(trs []ext.Transport) []TransportSnapshot {
	out := make([]TransportSnapshot, 0, len(trs))
	for _, t := range trs {
		out = append(out, TransportSnapshot{Key: string(t.Key()), Priority: t.Priority(), Stats: transportStats(t)})
	}
	return out
}

// transportStats reads the counters of a transport's Stats method (each
// transport returns a struct of its own), looking through wrappers.
func transportStats(t ext.Transport) map[string]uint64 {
	for t != nil {
		if m := reflect.ValueOf(t).MethodByName("Stats"); m.IsValid() && m.Type().NumIn() == 0 && m.Type().NumOut() == 1 {
			return counterFields(m.Call(nil)[0])
		}
		w, ok := t.(ext.TransportWrapper)
		if !ok {
			return nil
		}
		t = w.Unwrap()
	}
	return nil
}

func counterFields(v reflect.Value) map[string]uint64 {
	if v.Kind() != reflect.Struct {
		return nil
	}
	out := map[string]uint64{}
	for i := range v.NumField() {
		f, ft := v.Field(i), v.Type().Field(i)
		if !ft.IsExported() {
			continue
		}
		switch {
		case f.CanUint():
			out[ft.Name] = f.Uint()
		case f.CanInt() && f.Int() >= 0:
			out[ft.Name] = uint64(f.Int())
		}
	}
	return out
}

func (n *Node) peerSnapshots(now time.Time, lanes map[ext.TransportKey]ext.LaneStatser) ([]PeerSnapshot, CallsSnapshot) {
	views := n.m.PeerViews()
	sort.Slice(views, func(i, j int) bool { // the node itself first, then by instance
		if views[i].Self != views[j].Self {
			return views[i].Self
		}
		return bytes.Compare(views[i].Instance[:], views[j].Instance[:]) < 0
	})
	out := make([]PeerSnapshot, len(views))
	byWorker := make(map[ext.WorkerID]*PeerSnapshot, len(views))
	for i, v := range views {
		out[i] = peerSnapshot(v)
		if !v.Self {
			out[i].LaneStats = laneSnapshots(lanes, v.Instance, primaryFirst(v.Primary, v.Transports))
		}
		byWorker[v.Worker] = &out[i]
	}
	calls := CallsSnapshot{RunningHandlers: n.m.RunningHandlers()}
	n.m.PendingCalls(func(c messenger.PendingCall) {
		age := n.view.calls.see(c, now).Seconds()
		calls.InFlight++
		calls.OldestCallSeconds = max(calls.OldestCallSeconds, age)
		if p := byWorker[c.Worker]; p != nil {
			p.InFlight++
			p.OldestCallSeconds = max(p.OldestCallSeconds, age)
		}
	})
	n.view.calls.roll()
	return out, calls
}

func peerSnapshot(v messenger.PeerView) PeerSnapshot {
	p := PeerSnapshot{
		Instance: v.Instance.String(), Worker: v.Worker.String(), Primary: string(v.Primary), Lanes: v.Lanes,
		Handshake: v.Handshake, Connected: v.Connected, Self: v.Self, Restarted: v.Restarted, Discovered: v.Discovered,
		ConnectionsLost: v.ConnectionsLost, Handlers: v.Handlers, Undelivered: v.Undelivered,
		Transports: make([]string, len(v.Transports)),
	}
	for i, k := range v.Transports {
		p.Transports[i] = string(k)
	}
	if !v.ConnectedSince.IsZero() {
		t := v.ConnectedSince
		p.ConnectedSince = &t
	}
	return p
}

func (n *Node) muxSnapshots(peers []PeerSnapshot) []MuxPeerSnapshot {
	views := n.Streams.MuxView()
	inst := make(map[string]string, len(peers))
	for _, p := range peers {
		inst[p.Worker] = p.Instance
	}
	out := make([]MuxPeerSnapshot, 0, len(views))
	for _, v := range views {
		w := v.Peer.String()
		m := MuxPeerSnapshot{Worker: w, Instance: inst[w], BudgetBytes: v.BudgetBytes, BudgetLimit: v.BudgetLimit, HoldBytes: v.HoldBytes,
			Batchers: make([]MuxBatcherSnapshot, 0, len(v.Batchers)), Ingress: make([]MuxIngressSnapshot, 0, len(v.Ingress))}
		for _, b := range v.Batchers {
			m.Batchers = append(m.Batchers, MuxBatcherSnapshot{Lane: b.Lane, State: b.State, Epoch: b.Epoch, LiveSlots: b.LiveSlots,
				Credit: b.Credit, Window: b.Window, Starved: b.Starved, Withheld: b.Withheld, QueuedBytes: b.QueuedBytes, PendingAttaches: b.PendingAttaches})
			m.LiveSlots += b.LiveSlots
		}
		for _, ip := range v.Ingress {
			m.Ingress = append(m.Ingress, MuxIngressSnapshot{Lane: ip.Lane, Epoch: ip.Epoch, LiveSlots: ip.LiveSlots, Credit: ip.Credit, HeldRecords: ip.HeldRecords})
			m.LiveSlots += ip.LiveSlots
		}
		out = append(out, m)
	}
	return out
}

func (n *Node) anchorSnapshot(now time.Time) AnchorsSnapshot {
	a := AnchorsSnapshot{ByPhase: make(map[string]int, len(streaming.AnchorPhases))}
	for _, p := range streaming.AnchorPhases {
		a.ByPhase[p] = 0
	}
	var top oldest
	n.Streams.VisitAnchors(func(v streaming.AnchorView) {
		a.Total++
		a.ByPhase[v.Phase]++
		age := n.view.anchors.see(v.Handle, now)
		if !top.wants(age) {
			return
		}
		s := AnchorSnapshot{ID: shortAnchorID(v.Handle), MPSC: v.Handle.IsMPSC(), Phase: v.Phase, Via: v.Via,
			Queued: v.Queued, Producers: v.Producers, AgeSeconds: age.Seconds()}
		if !v.Expires.IsZero() {
			left := max(0, v.Expires.Sub(now).Seconds())
			s.ExpiresInSeconds = &left
		}
		top.add(age, s)
	})
	n.view.anchors.roll()
	a.Oldest = top.list()
	return a
}

// shortAnchorID shows enough of a handle to tell anchors apart on a page,
// and not enough to attach to one.
func shortAnchorID(h streaming.AnchorHandle) string {
	const hex = "0123456789abcdef"
	lo := uint16(h.LocalID())
	return string([]byte{'.', '.', hex[lo>>12], hex[lo>>8&15], hex[lo>>4&15], hex[lo&15]})
}

func eventSnapshots(evs []messenger.RecordedPeerEvent) []PeerEventSnapshot {
	out := make([]PeerEventSnapshot, 0, len(evs))
	for _, e := range evs {
		s := PeerEventSnapshot{At: e.At, Kind: e.Kind.String(), Instance: e.Instance.String(), Worker: e.Worker.String(),
			Transport: string(e.Transport), Remote: e.Remote}
		if e.NewInstance != (ext.InstanceID{}) {
			s.NewInstance = e.NewInstance.String()
		}
		if e.Err != nil {
			s.Err = e.Err.Error()
		}
		out = append(out, s)
	}
	return out
}
