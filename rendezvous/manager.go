// Package rendezvous moves large payloads by handle. The owner stages the
// bytes and hands out a DataHandle; each consumer pulls them from the
// owner in ChunkSize pieces over ordinary messenger calls (_rv_acquire,
// then _rv_pull per chunk) and ends its lease with _rv_detach or
// _rv_release. The owner decides the path of each transfer in its answer
// to _rv_acquire; this node answers chunked, the path that works on every
// transport.
//
// Manager also implements messenger.Stager: the messenger stages any
// request payload above Threshold and the receiver fetches it before the
// handler runs (transparent staging, see docs/rendezvous.md).
package rendezvous

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/velo-go/velo/ext"
	"github.com/velo-go/velo/messenger"
	"github.com/velo-go/velo/metrics"
)

// DefaultThreshold is the payload size above which the messenger stages.
const DefaultThreshold = 256 << 10

// pullWindow is how many chunk pulls one consumer keeps in flight.
const pullWindow = 4

// Config builds a Manager.
type Config struct {
	// Threshold: request payloads longer than this are staged (default DefaultThreshold).
	Threshold int
	// FetchTimeout bounds the fetch of a staged request that carried no
	// deadline of its caller (StagedFetchTimeout); 0 means no bound.
	FetchTimeout time.Duration
	// PayloadMax is the largest staged payload this node takes from a
	// peer (StagedPayloadMax), checked against the owner's stated size
	// before anything of that size is allocated; 0 means no limit.
	PayloadMax int64
	// Metrics, when set, receives the Rendezvous family.
	Metrics *metrics.VeloMetrics
}

// Manager is one node's rendezvous: the owner's store and handlers, and
// the consumer's calls.
type Manager struct {
	m   *messenger.Messenger
	cfg Config
	st  *store
	met *metrics.RendezvousMetrics

	staged, fetched atomic.Int64 // transparent payloads staged here, and fetched by this node

	acquireHook atomic.Pointer[func()] // tests: runs at the start of every _rv_acquire answered
}

// ErrPayloadTooLarge is refused by PayloadMax; the error names both sizes.
var ErrPayloadTooLarge = errors.New("rendezvous: staged payload over this node's limit")

// ErrNotFound: the owner has no such slot or lease (freed, expired, never staged).
var ErrNotFound = errors.New("rendezvous: handle not found")

// fetchAllocs counts destination buffers Fetch allocated (a test seam).
var fetchAllocs atomic.Int64

// New builds the manager and registers the owner's seven handlers on m.
func New(m *messenger.Messenger, cfg Config) (*Manager, error) {
	if cfg.Threshold == 0 {
		cfg.Threshold = DefaultThreshold
	}
	if cfg.Threshold < 0 || cfg.FetchTimeout < 0 || cfg.PayloadMax < 0 {
		return nil, errors.New("rendezvous: negative threshold, fetch timeout or payload limit")
	}
	r := &Manager{m: m, cfg: cfg, st: newStore(), met: cfg.Metrics.Rendezvous()}
	if r.met != nil {
		r.st.onCount = r.met.ActiveSlots
		r.st.onExpire = func(n int) {
			for range n {
				r.met.Op(metrics.RvExpire, true, time.Time{})
			}
		}
	}
	// Memory-only answers: they run on the connection's reader. Those that
	// serve a transfer already started pass a drain; metadata and ref
	// start a new consumer, so the gate refuses them.
	inline := messenger.WithInline()
	exempt := messenger.WithDrainExempt()
	hs := []messenger.Handler{
		messenger.UnaryHandler(HandlerMetadata, r.onMetadata, inline),
		// The acquire, once per transfer, runs spawned: its test hook may wait.
		messenger.UnaryHandler(HandlerAcquire, r.onAcquire, exempt),
		messenger.UnaryHandler(HandlerPull, r.onPull, inline, exempt),
		messenger.UnaryHandler(HandlerRef, r.onRef, inline),
		messenger.FireHandler(HandlerDetach, func(c *messenger.Context) { r.onEnd(c, false) }, inline, exempt),
		messenger.FireHandler(HandlerRelease, func(c *messenger.Context) { r.onEnd(c, true) }, inline, exempt),
		messenger.FireHandler(HandlerLeaseRenew, r.onRenew, inline, exempt),
	}
	for _, h := range hs {
		if err := m.RegisterSystem(h); err != nil {
			return nil, err
		}
	}
	return r, nil
}

// Close stops the sweep. Staged slots stay until the process lets them go.
func (r *Manager) Close() { r.st.close() }

// Transparent reports how many request payloads the messenger staged on
// this node, and how many staged payloads this node fetched for its handlers.
func (r *Manager) Transparent() (staged, fetched int64) { return r.staged.Load(), r.fetched.Load() }

// HeldBytes reports the bytes and slots this owner holds staged.
func (r *Manager) HeldBytes() (bytes int64, slots int) { return r.st.heldBytes() }

// ---- the owner ----

// RegisterData stages data with refcount 1 and returns its handle. The
// manager keeps data itself: the caller must not change it afterwards.
func (r *Manager) RegisterData(data []byte) DataHandle {
	return r.register(data, 0)
}

// RegisterDataTTL is RegisterData with a time-to-live: past it, the slot
// is freed with every lease on it.
func (r *Manager) RegisterDataTTL(data []byte, ttl time.Duration) DataHandle {
	return r.register(data, ttl)
}

func (r *Manager) register(data []byte, ttl time.Duration) DataHandle {
	id := r.st.register(data, ttl)
	r.met.Op(metrics.RvRegister, true, time.Time{})
	r.met.Bytes(metrics.RvRegister, len(data))
	return DataHandle{Hi: uint64(r.m.WorkerID()), Lo: id}
}

// mine checks that a handle names a slot of this owner.
func (r *Manager) mine(h DataHandle) error {
	if h.Owner() != r.m.WorkerID() {
		return fmt.Errorf("%w: %s is owned by worker %d, not this one", ErrNotFound, h, h.Hi)
	}
	return nil
}

func (r *Manager) onMetadata(c *messenger.Context) ([]byte, error) {
	var req handleRequest
	if err := decode(c.Payload, &req); err != nil {
		return nil, err
	}
	if err := r.mine(req.Handle); err != nil {
		return nil, err
	}
	md, ok := r.st.metadata(req.Handle.Lo)
	if !ok {
		return nil, fmt.Errorf("%w: %s", ErrNotFound, req.Handle)
	}
	return json.Marshal(md)
}

func (r *Manager) onAcquire(c *messenger.Context) ([]byte, error) {
	if f := r.acquireHook.Load(); f != nil {
		(*f)()
	}
	start := time.Now()
	var req handleRequest
	err := decode(c.Payload, &req)
	if err == nil {
		err = r.mine(req.Handle)
	}
	var timeout time.Duration
	if err == nil {
		if h, herr := c.Headers(); herr == nil {
			if v, ok := h[LeaseHeader]; ok {
				if ms, perr := strconv.ParseUint(v, 10, 32); perr == nil && ms > 0 {
					timeout = time.Duration(ms) * time.Millisecond
				}
			}
		}
	}
	var rd ready
	if err == nil {
		var ok bool
		if rd, ok = r.st.acquire(req.Handle.Lo, timeout); !ok {
			err = fmt.Errorf("%w: %s", ErrNotFound, req.Handle)
		}
	}
	r.met.Op(metrics.RvAcquire, err == nil, start)
	if err != nil {
		return nil, err
	}
	return json.Marshal(acquireAnswer{Ready: &rd})
}

func (r *Manager) onPull(c *messenger.Context) ([]byte, error) {
	var req pullRequest
	if err := decode(c.Payload, &req); err != nil {
		return nil, err
	}
	b, ok := r.st.chunk(req.TransferID, req.ChunkIndex)
	r.met.Op(metrics.RvPull, ok, time.Time{})
	if !ok {
		return nil, fmt.Errorf("%w: chunk %d of transfer %d", ErrNotFound, req.ChunkIndex, req.TransferID)
	}
	r.met.Bytes(metrics.RvPull, len(b))
	return b, nil
}

func (r *Manager) onRef(c *messenger.Context) ([]byte, error) {
	var req handleRequest
	if err := decode(c.Payload, &req); err != nil {
		return nil, err
	}
	if err := r.mine(req.Handle); err != nil {
		return nil, err
	}
	if !r.st.ref(req.Handle.Lo) {
		return nil, fmt.Errorf("%w: %s", ErrNotFound, req.Handle)
	}
	return nil, nil
}

func (r *Manager) onEnd(c *messenger.Context, deref bool) {
	var req leaseRequest
	if decode(c.Payload, &req) != nil || r.mine(req.Handle) != nil {
		return
	}
	op := metrics.RvDetach
	if deref {
		op = metrics.RvRelease
	}
	r.met.Op(op, r.st.endLease(req.Handle.Lo, req.LeaseID, deref), time.Time{})
}

func (r *Manager) onRenew(c *messenger.Context) {
	var req leaseRequest
	if decode(c.Payload, &req) == nil && r.mine(req.Handle) == nil {
		r.st.renew(req.Handle.Lo, req.LeaseID)
	}
}

// ---- the consumer ----

// owner finds the instance that staged h.
func (r *Manager) owner(h DataHandle) (ext.InstanceID, error) {
	id, ok := r.m.InstanceOf(h.Owner())
	if !ok {
		return ext.InstanceID{}, fmt.Errorf("rendezvous: the owner of %s (worker %d) is not a known peer", h, h.Hi)
	}
	return id, nil
}

func (r *Manager) local(h DataHandle) bool { return h.Owner() == r.m.WorkerID() }

// Metadata asks the owner for the size and refcount of h, taking no lease.
func (r *Manager) Metadata(ctx context.Context, h DataHandle) (Metadata, error) {
	start := time.Now()
	md, err := r.metadata(ctx, h)
	r.met.Op(metrics.RvMetadata, err == nil, start)
	return md, err
}

func (r *Manager) metadata(ctx context.Context, h DataHandle) (Metadata, error) {
	if r.local(h) {
		md, ok := r.st.metadata(h.Lo)
		if !ok {
			return Metadata{}, fmt.Errorf("%w: %s", ErrNotFound, h)
		}
		return md, nil
	}
	target, err := r.owner(h)
	if err != nil {
		return Metadata{}, err
	}
	return messenger.TypedUnary[Metadata](ctx, r.m, target, HandlerMetadata, handleRequest{Handle: h})
}

// Get pulls the payload of h and returns it with the lease it holds. End
// the lease with Detach (keep the reference) or Release.
func (r *Manager) Get(ctx context.Context, h DataHandle) ([]byte, uint64, error) {
	start := time.Now()
	b, lease, err := r.get(ctx, h, 0, 0, func(n int) ([]byte, error) { return make([]byte, n), nil })
	r.met.Op(metrics.RvGet, err == nil, start)
	r.met.Bytes(metrics.RvGet, len(b))
	return b, lease, err
}

// GetInto pulls the payload of h into dst, which must be at least as long,
// and returns the length and the lease.
func (r *Manager) GetInto(ctx context.Context, h DataHandle, dst []byte) (int, uint64, error) {
	start := time.Now()
	b, lease, err := r.get(ctx, h, 0, 0, func(n int) ([]byte, error) {
		if n > len(dst) {
			return nil, fmt.Errorf("rendezvous: the payload of %d bytes does not fit a buffer of %d", n, len(dst))
		}
		return dst[:n], nil
	})
	r.met.Op(metrics.RvGet, err == nil, start)
	r.met.Bytes(metrics.RvGet, len(b))
	return len(b), lease, err
}

// get acquires h, checks the stated size against max (0: none), allocates
// with alloc and pulls every chunk. leaseTimeout > 0 asks the owner for a
// lease deadline. On an error after the acquire the lease is detached
// (released, when the size was refused and release is the rule).
func (r *Manager) get(ctx context.Context, h DataHandle, leaseTimeout time.Duration, max int64, alloc func(int) ([]byte, error)) ([]byte, uint64, error) {
	if r.local(h) {
		return r.getLocal(h, max, alloc)
	}
	target, err := r.owner(h)
	if err != nil {
		return nil, 0, err
	}
	var opts []messenger.CallOption
	if leaseTimeout > 0 {
		ms := (leaseTimeout + time.Millisecond - 1) / time.Millisecond
		opts = append(opts, messenger.WithHeaders(map[string]string{LeaseHeader: strconv.FormatInt(int64(ms), 10)}))
	}
	body, _ := json.Marshal(handleRequest{Handle: h})
	raw, err := r.m.Unary(ctx, target, HandlerAcquire, body, opts...)
	if err != nil {
		return nil, 0, err
	}
	var ans acquireAnswer
	if err := json.Unmarshal(raw, &ans); err != nil {
		return nil, 0, fmt.Errorf("rendezvous: decode the acquire answer: %w", err)
	}
	if ans.Rdma != nil {
		// This node made no RDMA offer, so an RDMA answer is the owner's fault.
		r.post(target, HandlerDetach, leaseRequest{Handle: h, LeaseID: ans.Rdma.LeaseID})
		return nil, 0, errors.New("rendezvous: the owner answered RDMA to an acquire that made no offer")
	}
	rd := ans.Ready
	if max > 0 && rd.TotalLen > uint64(max) {
		r.post(target, HandlerRelease, leaseRequest{Handle: h, LeaseID: rd.LeaseID})
		return nil, 0, fmt.Errorf("%w: the owner states %d bytes, the limit is %d", ErrPayloadTooLarge, rd.TotalLen, max)
	}
	if err := checkReady(rd); err != nil {
		r.post(target, HandlerDetach, leaseRequest{Handle: h, LeaseID: rd.LeaseID})
		return nil, 0, err
	}
	dst, err := alloc(int(rd.TotalLen))
	if err != nil {
		r.post(target, HandlerDetach, leaseRequest{Handle: h, LeaseID: rd.LeaseID})
		return nil, 0, err
	}
	if err := r.pullAll(ctx, target, rd, dst); err != nil {
		r.post(target, HandlerDetach, leaseRequest{Handle: h, LeaseID: rd.LeaseID})
		return nil, 0, err
	}
	return dst, rd.LeaseID, nil
}

// checkReady refuses an answer whose numbers do not agree.
func checkReady(rd *ready) error {
	if rd.TotalLen > uint64(int(^uint(0)>>1)) {
		return fmt.Errorf("rendezvous: stated size %d does not fit in memory", rd.TotalLen)
	}
	if rd.TotalLen == 0 && rd.ChunkCount == 0 {
		return nil
	}
	if rd.ChunkSize == 0 || uint64(rd.ChunkCount) != (rd.TotalLen+uint64(rd.ChunkSize)-1)/uint64(rd.ChunkSize) {
		return fmt.Errorf("rendezvous: %d chunks of %d bytes do not make %d bytes", rd.ChunkCount, rd.ChunkSize, rd.TotalLen)
	}
	return nil
}

// pullAll pulls every chunk into dst, pullWindow in flight. Each answer
// is copied into dst on the transport's reader, straight from the read
// buffer (UnaryAsyncView), which then sends the next pull: no goroutine
// per chunk and one copy per byte.
func (r *Manager) pullAll(ctx context.Context, target ext.InstanceID, rd *ready, dst []byte) error {
	if rd.ChunkCount == 0 {
		return nil
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var (
		mu       sync.Mutex
		next     uint32
		inFlight int
		first    error
		finished = make(chan struct{})
	)
	var issue func()
	// settle records one finished pull (err nil: success) and issues the
	// next; it closes finished when nothing is in flight and nothing left.
	settle := func(err error) {
		mu.Lock()
		inFlight--
		if err != nil && first == nil {
			first = err
			cancel()
		}
		done := inFlight == 0 && (first != nil || next >= rd.ChunkCount)
		mu.Unlock()
		if done {
			close(finished)
			return
		}
		issue()
	}
	issue = func() {
		mu.Lock()
		if first != nil || next >= rd.ChunkCount {
			mu.Unlock()
			return
		}
		i := next
		next++
		inFlight++
		mu.Unlock()
		body, _ := json.Marshal(pullRequest{TransferID: rd.TransferID, ChunkIndex: i})
		off := uint64(i) * uint64(rd.ChunkSize)
		want := min(uint64(rd.ChunkSize), rd.TotalLen-off)
		err := r.m.UnaryAsyncView(ctx, target, HandlerPull, body, func(b []byte, err error) {
			switch {
			case err != nil:
				err = fmt.Errorf("rendezvous: pull chunk %d: %w", i, err)
			case uint64(len(b)) != want:
				err = fmt.Errorf("rendezvous: chunk %d has %d bytes, want %d", i, len(b), want)
			default:
				copy(dst[off:], b)
			}
			settle(err)
		})
		if err != nil {
			settle(fmt.Errorf("rendezvous: pull chunk %d: %w", i, err))
		}
	}
	for range min(int(rd.ChunkCount), pullWindow) {
		issue()
	}
	<-finished
	return first
}

// getLocal serves a handle this node owns without the network.
func (r *Manager) getLocal(h DataHandle, max int64, alloc func(int) ([]byte, error)) ([]byte, uint64, error) {
	rd, ok := r.st.acquire(h.Lo, 0)
	if !ok {
		return nil, 0, fmt.Errorf("%w: %s", ErrNotFound, h)
	}
	if max > 0 && rd.TotalLen > uint64(max) {
		r.st.endLease(h.Lo, rd.LeaseID, true)
		return nil, 0, fmt.Errorf("%w: the owner states %d bytes, the limit is %d", ErrPayloadTooLarge, rd.TotalLen, max)
	}
	dst, err := alloc(int(rd.TotalLen))
	if err != nil {
		r.st.endLease(h.Lo, rd.LeaseID, false)
		return nil, 0, err
	}
	for i := range rd.ChunkCount {
		b, _ := r.st.chunk(rd.TransferID, i)
		copy(dst[uint64(i)*uint64(rd.ChunkSize):], b)
	}
	return dst, rd.LeaseID, nil
}

// post sends a fire-and-forget control message without waiting.
func (r *Manager) post(target ext.InstanceID, handler string, body any) {
	b, _ := json.Marshal(body)
	_ = r.m.Post(target, handler, b)
}

// Ref adds one reference to h, for one more consumer; it returns once the
// owner counted it.
func (r *Manager) Ref(ctx context.Context, h DataHandle) error {
	start := time.Now()
	err := r.ref(ctx, h)
	r.met.Op(metrics.RvRef, err == nil, start)
	return err
}

func (r *Manager) ref(ctx context.Context, h DataHandle) error {
	if r.local(h) {
		if !r.st.ref(h.Lo) {
			return fmt.Errorf("%w: %s", ErrNotFound, h)
		}
		return nil
	}
	target, err := r.owner(h)
	if err != nil {
		return err
	}
	body, _ := json.Marshal(handleRequest{Handle: h})
	_, err = r.m.Unary(ctx, target, HandlerRef, body)
	return err
}

// Detach ends a lease and keeps the reference: h can be fetched again.
func (r *Manager) Detach(ctx context.Context, h DataHandle, lease uint64) error {
	return r.end(ctx, h, lease, false)
}

// Release ends a lease and drops one reference; the owner frees the slot
// when no reference and no lease is left.
func (r *Manager) Release(ctx context.Context, h DataHandle, lease uint64) error {
	return r.end(ctx, h, lease, true)
}

func (r *Manager) end(ctx context.Context, h DataHandle, lease uint64, deref bool) error {
	op, name := metrics.RvDetach, HandlerDetach
	if deref {
		op, name = metrics.RvRelease, HandlerRelease
	}
	var err error
	if r.local(h) {
		if !r.st.endLease(h.Lo, lease, deref) {
			err = fmt.Errorf("%w: lease %d of %s", ErrNotFound, lease, h)
		}
	} else {
		var target ext.InstanceID
		if target, err = r.owner(h); err == nil {
			body, _ := json.Marshal(leaseRequest{Handle: h, LeaseID: lease})
			err = r.m.Send(ctx, target, name, body)
		}
	}
	r.met.Op(op, err == nil, time.Time{})
	return err
}

// ---- messenger.Stager ----

var _ messenger.Stager = (*Manager)(nil)

// Threshold implements messenger.Stager.
func (r *Manager) Threshold() int { return r.cfg.Threshold }

// FetchTimeout implements messenger.Stager.
func (r *Manager) FetchTimeout() time.Duration { return r.cfg.FetchTimeout }

// Stage implements messenger.Stager: a copy, since the caller reuses its
// buffer once the call returns.
func (r *Manager) Stage(payload []byte, ttl time.Duration) (string, error) {
	r.staged.Add(1)
	return r.register(bytes.Clone(payload), ttl).String(), nil
}

// Discard implements messenger.Stager.
func (r *Manager) Discard(handle string) {
	if h, err := ParseHandle(handle); err == nil && r.local(h) {
		r.st.unref(h.Lo)
	}
}

// Fetch implements messenger.Stager: get, then release (a transparent
// handle has one reference, its one receiver). A payload over PayloadMax
// is released unread.
func (r *Manager) Fetch(ctx context.Context, handle string, bounded bool) ([]byte, error) {
	start := time.Now()
	h, err := ParseHandle(handle)
	if err != nil {
		return nil, err
	}
	var leaseTimeout time.Duration
	if dl, ok := ctx.Deadline(); ok && bounded {
		leaseTimeout = max(time.Until(dl), time.Millisecond)
	}
	b, lease, err := r.get(ctx, h, leaseTimeout, r.cfg.PayloadMax, func(n int) ([]byte, error) {
		fetchAllocs.Add(1)
		return make([]byte, n), nil
	})
	r.met.Op(metrics.RvGet, err == nil, start)
	if err != nil {
		return nil, err
	}
	r.met.Bytes(metrics.RvGet, len(b))
	r.fetched.Add(1)
	if r.local(h) {
		r.st.endLease(h.Lo, lease, true)
	} else if target, err := r.owner(h); err == nil {
		r.post(target, HandlerRelease, leaseRequest{Handle: h, LeaseID: lease})
	}
	r.met.Op(metrics.RvRelease, true, time.Time{})
	return b, nil
}
