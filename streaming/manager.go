package streaming

import (
	"context"
	"crypto/rand"
	"encoding/binary"
	"fmt"
	"math"
	"sync"
	"sync/atomic"
	"time"

	"github.com/velo-go/velo/ext"
	"github.com/velo-go/velo/internal/deadline"
	wire "github.com/velo-go/velo/internal/streamwire"
	"github.com/velo-go/velo/metrics"
	"github.com/velo-go/velo/streaming/internal/inlet"
)

// Manager creates the anchors of one node and attaches producers to them.
// It holds the anchors in a registry sharded by local id. It owns one
// goroutine, the sweeper of the unattached deadlines of all its anchors
// (see reservation.go); Close stops it.
type Manager struct {
	owner  ext.WorkerID
	shards [registryShards]registryShard

	res        ReservationConfig
	base       time.Time       // origin of inlet.State.deadline
	unattached *deadline.Queue // keyed by local id
	closed     atomic.Bool
	expired    atomic.Uint64 // anchors ended by their unattached timeout

	remote  *remote // set by NewNodeManager: streams to and from other workers
	openers openers // anchors that wait for a named opener (ExpectOpener)

	// home is what the inlets of its anchors share: the Manager as their
	// Owner, its metrics, deadlines and default lifetime, and the count
	// of consumer wakes.
	home inlet.Home

	met     *metrics.StreamingMetrics // nil: no metrics, nothing recorded
	untrack func()                    // removes activeAnchors from the gauge's sources
	traced  bool                      // WithTraceEvents (tracing.go)
}

// WithMetrics makes the Manager record into the Streaming family of vm
// (metrics.VeloMetrics.Streaming). A nil vm records nothing.
func WithMetrics(vm *metrics.VeloMetrics) ManagerOption {
	return ManagerOption{func(c *nodeConfig) { c.metrics = vm }}
}

// opStart reads the clock for an operation's duration, only when metrics
// are installed.
func (m *Manager) opStart() time.Time { return opStart(m.met) }

// opDone counts an operation that began at start.
func (m *Manager) opDone(op metrics.StreamOp, sc metrics.StreamScheme, start time.Time, err error) {
	opDone(m.met, op, sc, start, err)
}

// opStart is Manager.opStart for the metrics met (nil: none), which a
// sink names without its Manager.
func opStart(met *metrics.StreamingMetrics) time.Time {
	if met == nil {
		return time.Time{}
	}
	return time.Now()
}

// opDone is Manager.opDone for the metrics met (nil: none).
func opDone(met *metrics.StreamingMetrics, op metrics.StreamOp, sc metrics.StreamScheme, start time.Time, err error) {
	if met != nil {
		met.Operation(op, sc, err == nil, time.Since(start))
	}
}

const registryShards = 32

type registryShard struct {
	mu sync.Mutex
	m  map[uint64]*inlet.State
	_  [40]byte // keep shards on separate cache lines
}

// NewManager returns the Manager of the node whose WorkerID is owner. Its
// handles carry owner in their upper 64 bits. It starts the sweeper of
// unattached deadlines: Close the Manager when done.
func NewManager(owner ext.WorkerID, opts ...ManagerOption) *Manager {
	cfg := nodeConfig{res: DefaultReservationConfig()}
	for _, o := range opts {
		if o.apply != nil {
			o.apply(&cfg)
		}
	}
	return newManager(owner, &cfg)
}

// newManager is NewManager with its options applied: the reservation
// settings and the metrics of cfg.
func newManager(owner ext.WorkerID, cfg *nodeConfig) *Manager {
	m := &Manager{owner: owner, res: cfg.res, met: cfg.metrics.Streaming(), traced: cfg.traced}
	for i := range m.shards {
		m.shards[i].m = make(map[uint64]*inlet.State)
	}
	m.base = time.Now()
	m.unattached = deadline.New(deadline.DefaultShards, m.expireUnattached)
	m.home = inlet.Home{Owner: (*inletOwner)(m), Metrics: m.met, Lifetime: m.res.UnattachedTimeout,
		Base: m.base, Deadlines: m.unattached}
	if m.met != nil {
		m.untrack = m.met.TrackActive(m.activeAnchors)
	}
	return m
}

// Owner is the WorkerID in the handles of this Manager.
func (m *Manager) Owner() ext.WorkerID { return m.owner }

// activeAnchors counts the anchors in the registry: created, and neither
// ended nor closed.
func (m *Manager) activeAnchors() int {
	n := 0
	for i := range m.shards {
		s := &m.shards[i]
		s.mu.Lock()
		n += len(s.m)
		s.mu.Unlock()
	}
	return n
}

func (m *Manager) shard(localID uint64) *registryShard {
	return &m.shards[localID%registryShards]
}

// register gives st a fresh random local id and puts it in the registry.
// The id is the only credential a producer needs, so it comes from
// crypto/rand, never a counter.
// It reports false, registering nothing, once Close has begun: the flag is
// read under the shard lock that Close's sweep of the registry takes, so an
// anchor is either refused or cancelled by Close, never missed. With mpsc,
// the id carries wire.MPSCBit, in the handle and as the registry key.
func (m *Manager) register(st *inlet.State, mpsc bool) bool {
	var b [8]byte
	for {
		rand.Read(b[:]) // never fails (crypto/rand, Go 1.24+)
		id := binary.LittleEndian.Uint64(b[:]) &^ wire.MPSCBit
		if id == 0 {
			continue
		}
		if mpsc {
			id |= wire.MPSCBit
		}
		s := m.shard(id)
		s.mu.Lock()
		if m.closed.Load() {
			s.mu.Unlock()
			return false
		}
		if _, taken := s.m[id]; !taken {
			st.SetHandle(wire.AnchorHandle{Hi: uint64(m.owner), Lo: id})
			s.m[id] = st
			s.mu.Unlock()
			return true
		}
		s.mu.Unlock()
	}
}

func (m *Manager) lookup(localID uint64) *inlet.State {
	s := m.shard(localID)
	s.mu.Lock()
	st := s.m[localID]
	s.mu.Unlock()
	return st
}

// remove takes st out of the registry, and its unattached deadline out of
// the queue, so that an ended anchor leaves nothing behind; it is
// idempotent.
func (m *Manager) remove(st *inlet.State) {
	id := st.Handle().LocalID()
	s := m.shard(id)
	s.mu.Lock()
	mine := s.m[id] == st
	if mine {
		delete(s.m, id)
	}
	s.mu.Unlock()
	if mine {
		m.unattached.Remove(id)
		if id := st.Opener(); id != (ext.InstanceID{}) {
			m.openers.drop(id, st)
		}
	}
}

// AnchorOption changes one setting of CreateAnchor.
type AnchorOption struct {
	apply func(*anchorConfig)
}

type anchorConfig struct {
	capacity   int
	unattached time.Duration  // 0: the Manager's ReservationConfig
	codec      Codec          // nil: the default for T
	opener     ext.InstanceID // zero: none expected (ExpectOpener)
}

// WithCapacity sets how many frames the anchor's inlet holds before Send
// waits (defaultCapacity unless set). It must be at least 1.
func WithCapacity(n int) AnchorOption {
	return AnchorOption{func(c *anchorConfig) { c.capacity = n }}
}

// CreateAnchor makes an anchor for items of type T and registers it with
// m. T is any type the item codec can carry (see the package
// documentation; WithCodec sets another codec); the codec is chosen here,
// once, not per item, and a type it cannot carry is refused with
// ErrUnsupportedItem.
func CreateAnchor[T any](m *Manager, opts ...AnchorOption) (*Anchor[T], error) {
	start := m.opStart()
	a, err := createAnchor[T](m, opts)
	m.opDone(metrics.StreamCreate, metrics.SchemeLocal, start, err)
	if err == nil && m.met != nil {
		m.met.AnchorCreated(false)
	}
	return a, err
}

// anchorOptions applies opts to the defaults and checks them; an unset
// unattached timeout becomes unattached.
func anchorOptions(opts []AnchorOption, unattached time.Duration) (anchorConfig, error) {
	if len(opts) == 0 {
		// The usual case, kept apart: handing the config to an option
		// moves it to the heap, once per anchor.
		return anchorConfig{capacity: defaultCapacity, unattached: unattached}, nil
	}
	cfg := anchorConfig{capacity: defaultCapacity}
	for _, o := range opts {
		if o.apply != nil {
			o.apply(&cfg)
		}
	}
	return checkAnchorConfig(cfg, unattached)
}

func checkAnchorConfig(cfg anchorConfig, unattached time.Duration) (anchorConfig, error) {
	if cfg.capacity < 1 || cfg.capacity > math.MaxInt32 {
		return cfg, fmt.Errorf("%w: inlet capacity %d, must be at least 1", ErrBadOption, cfg.capacity)
	}
	if cfg.unattached < 0 {
		return cfg, fmt.Errorf("%w: unattached timeout %v, must be positive (Forever waits with no limit)", ErrBadOption, cfg.unattached)
	}
	if cfg.unattached == 0 {
		cfg.unattached = unattached
	}
	return cfg, nil
}

func createAnchor[T any](m *Manager, opts []AnchorOption) (*Anchor[T], error) {
	cfg, err := anchorOptions(opts, m.res.UnattachedTimeout)
	if err != nil {
		return nil, err
	}
	decode, err := decoderFor[T](cfg.codec)
	if err != nil {
		return nil, err
	}
	a := &Anchor[T]{decode: decode}
	if m.traced {
		a.trace = anchorTraceWaiting
	}
	a.st.Init(&m.home, cfg.capacity, cfg.unattached, cfg.opener) // before anyone else sees the anchor
	if !m.register(&a.st, false) {
		return nil, ErrManagerClosed
	}
	if cfg.opener != (ext.InstanceID{}) && m.remote != nil {
		m.openers.add(cfg.opener, &a.st)
	}
	// Armed after register: the key of the deadline is the local id. No
	// one else knows the handle yet, so nothing races with this.
	a.st.Arm()
	return a, nil
}

// AttachAnchor attaches a producer to the anchor that handle names and
// returns its Sender. T should match the anchor's T: the items travel as
// MessagePack, so the two ends need only agree on the bytes (a Go
// Sender[Token] and a Rust Anchor<Token> do). WithSenderCodec sets the
// codec, which must be the anchor's.
//
// A handle of another worker needs a Manager from NewNodeManager: the
// attach then asks the owner with _anchor_attach, and the stream rides the
// messenger mux, or one TCP connection of its own when the owner has no mux
// (see NewNodeManager and MuxConfig). Over the mux, an attach to an owner
// that already answered this node with the mux returns before the answer;
// a refusal then comes from the next Send, Finalize or Detach, or from
// Sender.Ready. On the same
// worker, a stop or cancel that the consumer made before the attach is
// already fired on the returned Sender.
func AttachAnchor[T any](ctx context.Context, m *Manager, handle AnchorHandle, opts ...SenderOption) (*Sender[T], error) {
	cfg := senderOptions(opts)
	return attachAnchorCounted[T](ctx, m, handle, cfg.key, cfg.codec)
}

func attachAnchorCounted[T any](ctx context.Context, m *Manager, handle wire.AnchorHandle, key *uint64, codec Codec) (*Sender[T], error) {
	start := m.opStart()
	s, err := attachAnchor[T](ctx, m, handle, key, codec)
	if m.traced {
		var first *firstToken
		var tr string
		if s != nil {
			first, tr = &s.first, s.sink.Transport()
		}
		m.traceAttach(ctx, "spsc", handle, first, tr, err)
	}
	// A remote attach is counted by the owner's handler (operation
	// "attach") and here only as its round trip (attach_rtt): the queueing
	// query in docs/metrics.md subtracts one from the other, so the sender must not
	// add its own, longer, attach durations to the owner's.
	if handle.Owner() == m.owner {
		m.opDone(metrics.StreamAttach, metrics.SchemeLocal, start, err)
	}
	return s, err
}

func attachAnchor[T any](ctx context.Context, m *Manager, handle wire.AnchorHandle, key *uint64, codec Codec) (*Sender[T], error) {
	encode, err := encoderFor[T](codec)
	if err != nil {
		return nil, err
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	if handle.IsMPSC() {
		return nil, fmt.Errorf("%w: %v names an MPSC anchor; use AttachMPSCAnchor", ErrAnchorKind, handle)
	}
	if handle.Owner() != m.owner {
		if m.remote == nil {
			return nil, fmt.Errorf("%w: %v", ErrRemoteAttach, handle)
		}
		return attachRemote(ctx, m.remote, handle, encode, key)
	}
	st := m.lookup(handle.LocalID())
	if st == nil {
		return nil, fmt.Errorf("%w: %v", ErrAnchorNotFound, handle)
	}
	switch st.ClaimLocal() {
	case inlet.ClaimEnded:
		// Ended or closed between the lookup and the claim.
		return nil, fmt.Errorf("%w: %v", ErrAnchorNotFound, handle)
	case inlet.ClaimTaken:
		return nil, fmt.Errorf("%w: %v", ErrAlreadyAttached, handle)
	}
	return newLocalSender(st, encode), nil
}

// consumerWakeCount counts the times a consumer waiting in Next was woken by a
// frame: divided by the records read, it is the wakes per record.
func (m *Manager) consumerWakeCount() uint64 { return m.home.Wakes() }
