package streaming

import (
	"context"
	"fmt"
	"math"
	"time"

	"github.com/velo-go/velo/ext"
	wire "github.com/velo-go/velo/internal/streamwire"
	"github.com/velo-go/velo/metrics"
	"github.com/velo-go/velo/streaming/internal/inlet"
	"github.com/velo-go/velo/streaming/internal/mux"
	"github.com/velo-go/velo/streaming/internal/streamerr"
)

// Forever, as an unattached timeout, makes an anchor wait for a producer
// with no limit. Such an anchor has no entry in
// the deadline queue.
const Forever time.Duration = math.MaxInt64

// ReservationConfig sets how long an anchor is kept for a producer that has
// not attached yet. Start from DefaultReservationConfig and change fields.
type ReservationConfig struct {
	// UnattachedTimeout is how long an anchor waits for a producer to
	// attach, after it is created and again after each Detach. An anchor
	// that waits longer ends with ErrUnattachedTimeout. 120 s by default;
	// Forever waits with no limit; WithUnattachedTimeout overrides it per
	// anchor.
	UnattachedTimeout time.Duration
	// AcceptWindow is how long a bind on the messenger mux (an attach's
	// or a PrebindAnchor's) waits for the producer's OpenSlot, 180 s by
	// default; the consumer then sees ErrSenderDropped. RenewReservations
	// extends it. The per-stream path has its own fixed window (the
	// constant AcceptWindow, 60 s).
	AcceptWindow time.Duration
}

// DefaultReservationConfig returns the defaults: an unattached timeout of
// 120 s and an accept window of 180 s.
func DefaultReservationConfig() ReservationConfig {
	return ReservationConfig{UnattachedTimeout: 120 * time.Second, AcceptWindow: 180 * time.Second}
}

// ManagerOption changes one setting of NewManager or NewNodeManager. The
// settings of a node's streams to other workers (WithMux, WithMuxOnly,
// WithHeartbeatInterval, WithStreamListenAddr, WithStreamLogger) change
// nothing in a Manager from NewManager, which has no such streams.
type ManagerOption struct {
	apply func(*nodeConfig)
}

// WithReservationConfig sets the Manager's ReservationConfig. A field that
// is zero or negative keeps its default.
func WithReservationConfig(c ReservationConfig) ManagerOption {
	return ManagerOption{func(nc *nodeConfig) {
		if c.UnattachedTimeout > 0 {
			nc.res.UnattachedTimeout = c.UnattachedTimeout
		}
		if c.AcceptWindow > 0 {
			nc.res.AcceptWindow = c.AcceptWindow
		}
	}}
}

// WithUnattachedTimeout sets this anchor's unattached timeout, overriding
// the Manager's ReservationConfig. It must be positive; Forever waits with
// no limit.
func WithUnattachedTimeout(d time.Duration) AnchorOption {
	return AnchorOption{func(c *anchorConfig) {
		if d <= 0 {
			d = -1 // refused by CreateAnchor, even for 0
		}
		c.unattached = d
	}}
}

// ErrUnattachedTimeout ends the stream of an anchor that no producer
// attached to within its unattached timeout. The anchor is then gone from
// its Manager: an attach gets ErrAnchorNotFound.
var ErrUnattachedTimeout = streamerr.ErrUnattachedTimeout

// ErrManagerClosed is returned by CreateAnchor after Manager.Close.
var ErrManagerClosed = streamerr.ErrManagerClosed

// defaultRenewTimeout bounds a RenewReservations call that renews on
// other workers; RenewReservationsContext takes the caller's deadline.
const defaultRenewTimeout = 10 * time.Second

// unattachedExpired counts the anchors of this Manager that ended because
// no producer attached within their unattached timeout.
func (m *Manager) unattachedExpired() uint64 { return m.expired.Load() }

// reservationConf returns the Manager's reservation settings.
func (m *Manager) reservationConf() ReservationConfig { return m.res }

// RenewReservations starts a new unattached window, of the anchor's full
// unattached timeout, for each handle that names a live, unattached SPSC
// anchor. Renewal of an attached, expired, cancelled, closed or unknown
// anchor is a successful no-op, including when it races with an attach or
// an expiry: renewal never revives a stream. Handles of other workers are
// sent to their owner (_anchor_renew, at most 256 handles per
// request), bounded by 10 s; a failed request, or an owner
// without the handler, is an error. The local handles are renewed all the
// same.
func (m *Manager) RenewReservations(handles ...AnchorHandle) error {
	ctx, cancel := context.WithTimeout(context.Background(), defaultRenewTimeout)
	defer cancel()
	return m.RenewReservationsContext(ctx, handles...)
}

// RenewReservationsContext is RenewReservations with the caller's context
// bounding the requests to other workers.
func (m *Manager) RenewReservationsContext(ctx context.Context, handles ...AnchorHandle) error {
	var byOwner map[ext.WorkerID][]wire.AnchorHandle
	n := 0
	for _, h := range handles {
		if h.Owner() == m.owner {
			// Each local handle counts as one successful renew, the
			// no-ops included: the call did what it promises for it.
			m.countRenew(metrics.SchemeLocal, true, 1)
			m.renewLocal(h)
			continue
		}
		if byOwner == nil {
			byOwner = make(map[ext.WorkerID][]wire.AnchorHandle)
		}
		byOwner[h.Owner()] = append(byOwner[h.Owner()], h)
		n++
	}
	if n == 0 {
		return nil
	}
	if m.remote == nil {
		m.countRenew(metrics.SchemeUnknown, false, n)
		return fmt.Errorf("%w: cannot renew %d handle(s)", ErrRemoteAttach, n)
	}
	err := m.remote.renewRemote(ctx, byOwner)
	m.countRenew(m.remote.tcp.Scheme(), err == nil, n)
	return err
}

func (m *Manager) countRenew(sc metrics.StreamScheme, ok bool, n int) {
	if m.met != nil {
		for range n {
			m.met.Operation(metrics.StreamRenew, sc, ok, 0)
		}
	}
}

// renewLocal renews one handle of this Manager, if it can be renewed.
func (m *Manager) renewLocal(h wire.AnchorHandle) {
	if h.IsMPSC() {
		return // renewal does not extend an MPSC anchor
	}
	st := m.lookup(h.LocalID())
	if st == nil {
		return
	}
	if bd := st.Renew(); bd != nil {
		// A pre-bound anchor waits on its bind's accept window, which
		// renewal extends while no OpenSlot has claimed it.
		m.remote.mux.RenewBind(bd.(*mux.Bind), m.remote.muxAcceptWindow())
	}
}

// Close stops the sweeper of unattached deadlines and cancels every anchor
// still in the Manager, as Anchor.Close does: consumers get ErrCancelled,
// attached producers see Cancelled. On a Manager from NewNodeManager it
// also closes the stream listener and every per-stream connection, and
// waits for their goroutines. Later CreateAnchor calls fail with
// ErrManagerClosed. Close is idempotent and returns nil.
func (m *Manager) Close() error {
	m.closed.Store(true)
	m.unattached.Close()
	var live []*inlet.State
	for i := range m.shards {
		s := &m.shards[i]
		s.mu.Lock()
		for _, st := range s.m {
			live = append(live, st)
		}
		s.mu.Unlock()
	}
	for _, st := range live {
		st.Cancel(true)
	}
	m.home.CloseWatches() // every anchor left its consumer's context's watch
	m.stopRemote()
	if m.untrack != nil {
		m.untrack() // idempotent
	}
	return nil
}

// expireUnattached is the queue's onExpire, on the sweeper goroutine. The
// entry may be stale: the anchor attached, or attached and detached (a new
// window, a new entry), or was renewed, between the pop and this lock; the
// armed flag and the deadline tell. An anchor that expires ends with
// ErrUnattachedTimeout (unless a cancel ended it first: the consumer sees
// one end only) and leaves the registry.
func (m *Manager) expireUnattached(id uint64) {
	st := m.lookup(id)
	if st == nil {
		return
	}
	st.ExpireIfDue()
}

// countExpired counts one anchor ended by its unattached deadline.
func (m *Manager) countExpired() {
	m.expired.Add(1)
	if m.met != nil {
		m.met.UnattachedTimeout()
	}
}
