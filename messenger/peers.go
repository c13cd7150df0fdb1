package messenger

import (
	"sort"
	"sync"
	"sync/atomic"

	"github.com/velo-go/velo/ext"
)

// peer is a registered remote instance and its route.
type peer struct {
	info    ext.PeerInfo
	primary ext.Transport
	// retains: primary keeps a frame's Owner while it holds the frame's
	// bytes (ext.OwnerRetainer), so a request may be built in a pooled
	// buffer (pooledRequestFrame).
	retains bool
	// ref is primary when it also takes frames by pointer and retains
	// owners (sendRequest); nil otherwise.
	ref ext.FrameRefSender
	// proves: the peer's address carries ProofKey, so it answers identity
	// challenges and a connection speaking for it must prove so.
	proves bool
	// loop: this is the node's entry for itself, routed by loopback
	// (loopback.go).
	loop bool
	// proofWindow (unix seconds) and proofCount bound the challenges
	// answered for this peer (allowProof).
	proofWindow atomic.Int64
	proofCount  atomic.Int32
	// hello is the handshake with this peer: done is closed once it has
	// run; handlers then holds the peer's handler names.
	helloMu  sync.Mutex
	helloRun *helloRun // non-nil while a handshake is in flight
	helloOK  atomic.Bool
	// connected: a transport reported a connection to this peer since it
	// was last lost (PeerConnected is reported once per such run).
	connected atomic.Bool
	handlers  atomic.Pointer[map[string]struct{}]
	// restarted is set when a handshake found another instance at this
	// peer's address: calls to it fail with ErrPeerRestarted until the new
	// instance is registered (a new peer entry).
	restarted atomic.Bool
	// epoch counts the connections lost to this peer. A handshake that
	// saw the epoch move while it ran proves nothing about the instance now
	// at the address, so it does not count.
	epoch atomic.Uint64
	// discovered marks a peer registered through discovery; lastUse (unix
	// nanoseconds) picks which one to forget when there are too many.
	discovered atomic.Bool
	lastUse    atomic.Int64
}

// peerTable maps instance and worker ids to peers. Sends read it without
// locking (copy on write); registration is rare.
type peerTable struct {
	mu    sync.Mutex
	byID  atomic.Pointer[map[ext.InstanceID]*peer]
	byWID atomic.Pointer[map[ext.WorkerID]*peer]
	// few is every entry of byID, as a list, while there are at most
	// fewPeers (nil above): get scans it instead of hashing the id, which
	// was a twentieth of a small message's cost to send. It is written
	// only with byID, so a sender's read shares its cache line with
	// nobody's write.
	few atomic.Pointer[[]idPeer]
}

// fewPeers is the most peers get finds by a scan: a few comparisons of
// 16 bytes cost less than the hash of the map's key.
const fewPeers = 8

type idPeer struct {
	id ext.InstanceID
	p  *peer
}

func newPeerTable() *peerTable {
	t := &peerTable{}
	a, b := map[ext.InstanceID]*peer{}, map[ext.WorkerID]*peer{}
	t.byID.Store(&a)
	t.byWID.Store(&b)
	t.few.Store(&[]idPeer{})
	return t
}

func (t *peerTable) get(id ext.InstanceID) (*peer, bool) {
	if few := t.few.Load(); few != nil {
		for _, e := range *few {
			if e.id == id {
				return e.p, true
			}
		}
		return nil, false
	}
	p, ok := (*t.byID.Load())[id]
	return p, ok
}

// store publishes the maps ids and wids (under mu), and the list of ids'
// entries when they are few.
func (t *peerTable) store(ids map[ext.InstanceID]*peer, wids map[ext.WorkerID]*peer) {
	t.byID.Store(&ids)
	t.byWID.Store(&wids)
	if len(ids) > fewPeers {
		t.few.Store(nil)
		return
	}
	few := make([]idPeer, 0, len(ids))
	for id, p := range ids {
		few = append(few, idPeer{id, p})
	}
	t.few.Store(&few)
}

func (t *peerTable) getWorker(w ext.WorkerID) (*peer, bool) {
	p, ok := (*t.byWID.Load())[w]
	return p, ok
}

func (t *peerTable) byWorker(w ext.WorkerID) (ext.InstanceID, bool) {
	if p, ok := t.getWorker(w); ok {
		return p.info.InstanceID, true
	}
	return ext.InstanceID{}, false
}

// put adds or replaces a peer; it returns the previous entry, if any.
func (t *peerTable) put(p *peer) *peer {
	t.mu.Lock()
	defer t.mu.Unlock()
	ids, wids := copyMap(*t.byID.Load()), copyMap(*t.byWID.Load())
	old := ids[p.info.InstanceID]
	ids[p.info.InstanceID] = p
	wids[p.info.WorkerID()] = p
	t.store(ids, wids)
	return old
}

func (t *peerTable) remove(id ext.InstanceID) (*peer, bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	old, ok := (*t.byID.Load())[id]
	if !ok {
		return nil, false
	}
	ids, wids := copyMap(*t.byID.Load()), copyMap(*t.byWID.Load())
	delete(ids, id)
	delete(wids, old.info.WorkerID())
	t.store(ids, wids)
	return old, true
}

func copyMap[K comparable, V any](m map[K]V) map[K]V {
	out := make(map[K]V, len(m)+1)
	for k, v := range m {
		out[k] = v
	}
	return out
}

// sortByPriority orders transports highest priority first.
func sortByPriority(ts []ext.Transport) {
	sort.SliceStable(ts, func(i, j int) bool { return ts[i].Priority() > ts[j].Priority() })
}
