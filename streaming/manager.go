package streaming

import (
	"context"
	"crypto/rand"
	"encoding/binary"
	"fmt"
	"sync"

	"github.com/velo-go/velo/ext"
	"github.com/velo-go/velo/streaming/wire"
)

// Manager creates the anchors of one node and attaches producers to them.
// It holds the anchors in a registry sharded by local id. It starts no
// goroutines.
type Manager struct {
	owner  ext.WorkerID
	shards [registryShards]registryShard
	remote *remote // set by NewNodeManager: streams to and from other workers
}

const registryShards = 32

type registryShard struct {
	mu sync.Mutex
	m  map[uint64]*anchorState
	_  [40]byte // keep shards on separate cache lines
}

// NewManager returns the Manager of the node whose WorkerID is owner. Its
// handles carry owner in their upper 64 bits.
func NewManager(owner ext.WorkerID) *Manager {
	m := &Manager{owner: owner}
	for i := range m.shards {
		m.shards[i].m = make(map[uint64]*anchorState)
	}
	return m
}

// Owner is the WorkerID in the handles of this Manager.
func (m *Manager) Owner() ext.WorkerID { return m.owner }

// ActiveAnchors counts the anchors in the registry: created, and neither
// ended nor closed.
func (m *Manager) ActiveAnchors() int {
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
// The id is the only credential a producer needs (the book: "the local ID
// in the handle is random"), so it comes from crypto/rand, never a counter.
func (m *Manager) register(st *anchorState) {
	var b [8]byte
	for {
		rand.Read(b[:]) // never fails (crypto/rand, Go 1.24+)
		id := binary.LittleEndian.Uint64(b[:]) &^ wire.MPSCBit
		if id == 0 {
			continue
		}
		s := m.shard(id)
		s.mu.Lock()
		if _, taken := s.m[id]; !taken {
			st.handle = wire.NewAnchorHandle(m.owner, id)
			s.m[id] = st
			s.mu.Unlock()
			return
		}
		s.mu.Unlock()
	}
}

func (m *Manager) lookup(localID uint64) *anchorState {
	s := m.shard(localID)
	s.mu.Lock()
	st := s.m[localID]
	s.mu.Unlock()
	return st
}

// remove takes st out of the registry; it is idempotent.
func (m *Manager) remove(st *anchorState) {
	id := st.handle.LocalID()
	s := m.shard(id)
	s.mu.Lock()
	if s.m[id] == st {
		delete(s.m, id)
	}
	s.mu.Unlock()
}

// AnchorOption changes one setting of CreateAnchor.
type AnchorOption struct {
	apply func(*anchorConfig)
}

type anchorConfig struct {
	capacity int
}

// WithCapacity sets how many frames the anchor's inlet holds before Send
// waits (DefaultCapacity unless set). It must be at least 1.
func WithCapacity(n int) AnchorOption {
	return AnchorOption{func(c *anchorConfig) { c.capacity = n }}
}

// CreateAnchor makes an anchor for items of type T and registers it with
// m. T is []byte or a type whose pointer is a MsgpackUnmarshaler;
// the choice is made here, once, not per item.
func CreateAnchor[T any](m *Manager, opts ...AnchorOption) (*Anchor[T], error) {
	decode, err := decoderFor[T]()
	if err != nil {
		return nil, err
	}
	cfg := anchorConfig{capacity: DefaultCapacity}
	for _, o := range opts {
		if o.apply != nil {
			o.apply(&cfg)
		}
	}
	if cfg.capacity < 1 {
		return nil, fmt.Errorf("%w: %d", ErrBadCapacity, cfg.capacity)
	}
	a := &Anchor[T]{decode: decode}
	a.st.mgr = m
	a.st.capLim = cfg.capacity
	m.register(&a.st)
	return a, nil
}

// AttachAnchor attaches a producer to the anchor that handle names and
// returns its Sender. T is []byte, or a MsgpackAppender (by value or by
// pointer), and should match the anchor's T: the items travel as
// MessagePack, so the two ends need only agree on the bytes.
//
// A handle of another worker needs a Manager from NewNodeManager: the
// attach then makes the _anchor_attach round trip to the owner and opens
// one TCP connection for the stream (see NewNodeManager). On the same
// worker, a stop or cancel that the consumer made before the attach is
// already fired on the returned Sender.
func AttachAnchor[T any](ctx context.Context, m *Manager, handle wire.AnchorHandle) (*Sender[T], error) {
	encode, err := encoderFor[T]()
	if err != nil {
		return nil, err
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	if handle.IsMPSC() {
		return nil, fmt.Errorf("%w: %v", ErrMPSCNotBuilt, handle)
	}
	if handle.Owner() != m.owner {
		if m.remote == nil {
			return nil, fmt.Errorf("%w: %v", ErrRemoteAttach, handle)
		}
		return attachRemote(ctx, m.remote, handle, encode)
	}
	st := m.lookup(handle.LocalID())
	if st == nil {
		return nil, fmt.Errorf("%w: %v", ErrAnchorNotFound, handle)
	}
	st.mu.Lock()
	defer st.mu.Unlock()
	switch {
	case st.closed || (st.endErr != nil && !st.cancelled):
		// Ended or closed between the lookup and the lock.
		return nil, fmt.Errorf("%w: %v", ErrAnchorNotFound, handle)
	case st.attached:
		return nil, fmt.Errorf("%w: %v", ErrAlreadyAttached, handle)
	}
	st.attached = true
	s := &Sender[T]{encode: encode}
	s.st = st
	return s, nil
}
