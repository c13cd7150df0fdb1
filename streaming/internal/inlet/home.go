package inlet

import (
	"io"
	"math"
	"sync/atomic"
	"time"

	"github.com/velo-go/velo/ext"
	"github.com/velo-go/velo/internal/deadline"
	wire "github.com/velo-go/velo/internal/streamwire"
	"github.com/velo-go/velo/metrics"
	"github.com/velo-go/velo/streaming/internal/retire"
)

// Forever, as an unattached lifetime, makes an anchor wait for a producer
// with no limit (streaming.Forever).
const Forever time.Duration = math.MaxInt64

// Home is what the inlets of one Manager share. Its owner fills the
// exported fields before the first anchor is made and never changes them:
// the inlet reads them without a lock.
type Home struct {
	// Owner is the Manager: the inlet takes an ended anchor out of its
	// registry, and counts an expiry, through it.
	Owner Owner
	// Metrics records the inlet's operations; nil records nothing.
	Metrics *metrics.StreamingMetrics
	// Lifetime is an SPSC anchor's unattached window unless the anchor
	// sets its own (Init); an MPSC anchor's default is Forever.
	Lifetime time.Duration
	// Base is the origin of the anchors' deadlines.
	Base time.Time
	// Deadlines holds the unattached deadlines, keyed by local id. Its
	// onExpire calls ExpireIfDue. Nil only when every anchor waits
	// Forever.
	Deadlines *deadline.Queue

	wakes   atomic.Uint64 // consumers woken from a wait for a frame
	watches watches       // the lone consumers' context watches (watch.go)
}

// Wakes counts the times a consumer waiting for a frame was woken.
func (h *Home) Wakes() uint64 { return h.wakes.Load() }

// now is the time in the unit of State.deadline.
func (h *Home) now() int64 { return int64(time.Since(h.Base)) }

// Owner is what the inlet asks of its Manager. Both calls are rare: an
// anchor's end, an expiry.
type Owner interface {
	// Remove takes st out of the registry (and its deadline out of the
	// queue); it is idempotent. The inlet may call it holding st's lock:
	// the registry's locks nest inside it.
	Remove(st *State)
	// CountExpired counts one anchor ended by its unattached deadline.
	CountExpired()
}

// Signaler is where a control message for a producer on another worker
// goes: _stream_stop or _stream_cancel, by handler name. Signal never
// waits.
type Signaler interface {
	Signal(handler string)
}

// Bind is a per-stream producer bound by _anchor_attach, as the inlet sees
// it. Conn and SetConn are guarded by the lock of the State the bind is
// claimed on: the inlet calls them under it, and nobody else.
type Bind interface {
	Signaler
	// Producer is the worker that attached: only it may end the stream
	// by a control message.
	Producer() ext.WorkerID
	// Proxy is the sender the bind's connection reader pushes as.
	Proxy() *Sender
	Conn() io.Closer
	SetConn(c io.Closer)
	// Unpend forgets the bind's wait for its connection: one that comes
	// later finds no bind.
	Unpend()
}

// Prebind is an unclaimed mux bind made before any producer asked (a
// stream open ticket). The inlet keeps it until an OpenSlot claims it or
// something releases it.
type Prebind interface {
	// Release takes the bind out of the mux's table, if it is still
	// there; its OpenSlot, if one ever comes, finds nothing. The inlet
	// calls it with no lock held.
	Release()
}

// Sender is a producer as the inlet sees it: the end of its output and
// what became of it. Its fields are guarded by the State's lock, except
// the Settlement's Known.
type Sender struct {
	st   *State
	done bool // finalized, detached or closed
	// pump marks the reader of a per-stream connection pushing for a
	// remote producer: its waits are the reader pump's backpressure, not
	// a Send's.
	pump bool
	retire.Settlement
}

// Init makes s a sender of st; pump says it is a per-stream connection's
// reader. It is for a Sender embedded in its owner, before first use.
func (s *Sender) Init(st *State, pump bool) { s.st, s.pump = st, pump }

// NewSender returns a sender of st (Init).
func NewSender(st *State, pump bool) *Sender {
	s := new(Sender)
	s.Init(st, pump)
	return s
}

// State is the inlet s sends into.
func (s *Sender) State() *State { return s.st }

// RetiredCh returns the channel that closes once s's outcome is known. It
// takes the inlet's lock only while the outcome is unknown: after the end,
// the common case, it is a load.
func (s *Sender) RetiredCh() <-chan struct{} {
	if s.Known() != 0 {
		return s.Closed()
	}
	s.st.mu.Lock()
	defer s.st.mu.Unlock()
	return s.WatchLocked()
}

// Init readies st, an SPSC anchor of home, before anyone else sees it:
// its capacity (frames before a push waits), its unattached lifetime (0:
// home's) and the instance expected to open it (zero: none).
func (st *State) Init(home *Home, capacity int, lifetime time.Duration, opener ext.InstanceID) {
	st.home = home
	st.capLim = int32(capacity)
	st.setLifetime(lifetime)
	if opener != (ext.InstanceID{}) {
		st.extraLocked().opener = opener
	}
}

// Init readies a, an MPSC anchor of home, as State.Init does; its default
// lifetime is Forever.
func (a *MPSC) Init(home *Home, capacity int, lifetime time.Duration) {
	st := &a.st
	st.home = home
	st.capLim = int32(capacity)
	st.mpsc = a // before setLifetime: an MPSC anchor's default is Forever
	st.setLifetime(lifetime)
}

// SetHandle names the anchor. Its registry calls it once, under the
// registry's lock, before the anchor can be looked up; it never changes
// after.
func (st *State) SetHandle(h wire.AnchorHandle) { st.handle = h }

// Handle names the anchor.
func (st *State) Handle() wire.AnchorHandle { return st.handle }

// Cap is the number of frames the inlet holds before a push waits.
func (st *State) Cap() int { return int(st.capLim) }

// Home is the Home of st's Manager.
func (st *State) Home() *Home { return st.home }

// MPSC is the MPSC anchor st belongs to, or nil for an SPSC anchor.
func (st *State) MPSC() *MPSC { return st.mpsc }

// Snapshot is what a look at the inlet under its lock sees: for a
// diagnostic, and for tests that wait for a party to block.
type Snapshot struct {
	Queued          int   // frames in the inlet
	RingLen         int   // entries of the ring's array
	IDRingLen       int   // entries of an MPSC anchor's id ring's array
	SendWaiting     bool  // a sender waits for room (its channel is made)
	ConsumerWaiting bool  // a consumer has waited for a frame (its channel is made)
	Armed           bool  // an unattached deadline runs
	Deadline        int64 // that deadline, in nanoseconds since Home.Base
	Feed            Slot  // the mux slot that feeds the inlet, or nil
	Remotes         int   // an MPSC anchor's producers on other workers
	Producers       int   // an MPSC anchor's attached producers
}

// Snapshot looks at the inlet under its lock.
func (st *State) Snapshot() Snapshot {
	st.mu.Lock()
	defer st.mu.Unlock()
	sn := Snapshot{
		Queued: st.q.n, RingLen: len(st.q.buf),
		SendWaiting: st.spaceWait != nil, ConsumerWaiting: st.dataWait != nil,
		Armed: st.armed, Deadline: st.deadline,
	}
	if st.feed != nil {
		sn.Feed = st.feed.slot
	}
	if a := st.mpsc; a != nil {
		sn.IDRingLen, sn.Remotes, sn.Producers = len(a.ids.buf), len(a.remotes), a.senders
	}
	return sn
}

// Hold takes the inlet's lock and returns what gives it back: a test
// stalls every party of the stream with it.
func (st *State) Hold() (release func()) {
	st.mu.Lock()
	return st.mu.Unlock
}

// satAdd is a+d, saturating at the largest deadline.
func satAdd(a int64, d time.Duration) int64 {
	if int64(d) > math.MaxInt64-a {
		return math.MaxInt64
	}
	return a + int64(d)
}
