package messenger

// Read-only views of the messenger's state for a live debug page
// (velo.Node.Snapshot): its peers, the calls waiting for an answer and
// its recent peer events. Nothing here is on a send or receive path: each
// view reads what the messenger keeps anyway, under the short locks that
// already guard it, and keeps no record per call.

import (
	"strings"
	"sync"
	"time"

	"github.com/velo-go/velo/ext"
	"github.com/velo-go/velo/internal/msgwire"
	"github.com/velo-go/velo/internal/peerevent"
)

// PeerView is one registered peer as a debug view shows it.
type PeerView struct {
	Instance ext.InstanceID
	Worker   ext.WorkerID
	// Transports are the keys of this node's transports that the peer's
	// address names, highest priority first; Primary is the one its
	// messages go on, and Lanes how many ordered lanes it keeps to it.
	Transports []ext.TransportKey
	Primary    ext.TransportKey
	Lanes      int
	// Handshake is "none" (not run yet, or lost since), "running" or
	// "done"; Restarted says another instance answered at its address.
	Handshake string
	Restarted bool
	Connected bool
	// Self marks the node's own entry, whose route (loopback) carries
	// its calls to itself.
	Self       bool
	Discovered bool
	// ConnectionsLost counts the connections lost to the peer.
	ConnectionsLost uint64
	// Handlers is how many user handlers the peer listed in its
	// handshake (velo's own, named with '_', are not counted).
	Handlers int
	// ConnectedSince is when the current run of connections began (the
	// PeerConnected event); zero when not connected or not seen.
	ConnectedSince time.Time
	// Undelivered counts messages to the peer the transports took and
	// then failed or discarded.
	Undelivered int64
}

// PeerViews lists the registered peers, in no particular order.
func (m *Messenger) PeerViews() []PeerView {
	peers := *m.peers.byID.Load() // copy on write: a stable map
	out := make([]PeerView, 0, len(peers))
	for _, p := range peers {
		out = append(out, m.peerView(p))
	}
	return out
}

func (m *Messenger) peerView(p *peer) PeerView {
	id := p.info.InstanceID
	v := PeerView{
		Instance: id, Worker: p.info.WorkerID(),
		Primary: p.primary.Key(), Lanes: p.primary.Lanes(id),
		Restarted: p.restarted.Load(), Connected: p.connected.Load(),
		Discovered: p.discovered.Load(), ConnectionsLost: p.epoch.Load(), Self: p.loop,
		Undelivered: m.Undelivered(id),
	}
	for _, tr := range m.trs { // m.trs is sorted by priority
		if _, ok := p.info.Address[tr.Key()]; ok && tr.Key() != msgwire.ProofKey {
			v.Transports = append(v.Transports, tr.Key())
		}
	}
	switch {
	case p.helloOK.Load():
		v.Handshake = "done"
	default:
		p.helloMu.Lock()
		running := p.helloRun != nil
		p.helloMu.Unlock()
		v.Handshake = "none"
		if running {
			v.Handshake = "running"
		}
	}
	if h := p.handlers.Load(); h != nil {
		for name := range *h {
			if !strings.HasPrefix(name, "_") { // velo's own are on every node
				v.Handlers++
			}
		}
	}
	if v.Connected {
		v.ConnectedSince = m.viewEvents.connectedSince(id)
	}
	return v
}

// PendingCall is one call waiting for its answer: the worker it went to
// and the slot and generation that name it. A slot and generation seen
// again in a later view are the same call, which is how a view measures
// how long calls wait without the messenger stamping each one.
type PendingCall struct {
	Worker ext.WorkerID
	Slot   uint32
	Gen    uint64
}

// PendingCalls calls fn for each call waiting for an answer. It walks the
// response slots in use (at most the largest number of calls that were
// ever in flight at once), taking each busy slot's lock for a moment; a
// slot that completes meanwhile is skipped or reported, either is fine.
func (m *Messenger) PendingCalls(fn func(PendingCall)) {
	t := m.slots
	for i := range t.fresh.Load() {
		s := t.at(i)
		if s == nil || s.peer.Load() == 0 {
			continue // free: a busy slot always names its peer
		}
		s.mu.Lock()
		c := PendingCall{Worker: ext.WorkerID(s.peer.Load()), Slot: i, Gen: s.gen}
		busy := s.busy
		s.mu.Unlock()
		if busy {
			fn(c)
		}
	}
}

// RunningHandlers is how many handlers run now (those the node's cap
// counts).
func (m *Messenger) RunningHandlers() int64 { return m.runs.Load() }

// RecordedPeerEvent is a peer event and when the messenger noticed it.
type RecordedPeerEvent struct {
	At time.Time
	peerevent.PeerEvent
}

// RecentPeerEvents returns the last peer events (at most
// RecentPeerEventsKept), oldest first.
func (m *Messenger) RecentPeerEvents() []RecordedPeerEvent { return m.viewEvents.recent() }

// RecentPeerEventsKept is how many peer events the messenger keeps for
// RecentPeerEvents.
const RecentPeerEventsKept = 64

// maxConnectedSince bounds the connection times kept: one per connected
// peer, and a peer unregistered while connected leaves one behind.
const maxConnectedSince = 1 << 14

// eventRing keeps the last peer events and, per peer, when its current
// run of connections began. The zero value is ready. Peer events are rare
// (a connection, a handshake, a loss), so a mutex is plenty.
type eventRing struct {
	mu    sync.Mutex
	buf   [RecentPeerEventsKept]RecordedPeerEvent
	n     int // events recorded, ever
	since map[ext.InstanceID]time.Time
}

func (r *eventRing) record(ev peerevent.PeerEvent) {
	now := time.Now()
	r.mu.Lock()
	defer r.mu.Unlock()
	r.buf[r.n%len(r.buf)] = RecordedPeerEvent{At: now, PeerEvent: ev}
	r.n++
	switch ev.Kind {
	case peerevent.PeerConnected:
		if r.since == nil {
			r.since = make(map[ext.InstanceID]time.Time)
		}
		if len(r.since) >= maxConnectedSince {
			for k := range r.since { // forget one at random: a bound, not a policy
				delete(r.since, k)
				break
			}
		}
		r.since[ev.Instance] = now
	case peerevent.PeerLost, peerevent.PeerShutDown, peerevent.PeerRestarted:
		delete(r.since, ev.Instance)
	}
}

func (r *eventRing) recent() []RecordedPeerEvent {
	r.mu.Lock()
	defer r.mu.Unlock()
	k := min(r.n, len(r.buf))
	out := make([]RecordedPeerEvent, 0, k)
	for i := r.n - k; i < r.n; i++ {
		out = append(out, r.buf[i%len(r.buf)])
	}
	return out
}

func (r *eventRing) connectedSince(id ext.InstanceID) time.Time {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.since[id]
}

// Transports are the node's transports, highest priority first.
func (m *Messenger) Transports() []ext.Transport { return append([]ext.Transport(nil), m.trs...) }
