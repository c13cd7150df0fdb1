// Package rendezvous moves large payloads by handle. The owner stages the
// bytes and hands out a DataHandle; each consumer pulls them from the
// owner in ChunkSize pieces over ordinary messenger calls (_rv_acquire,
// then _rv_pull per chunk) and ends its lease with _rv_detach or
// _rv_release. The owner decides the path of each transfer in its answer
// to _rv_acquire: chunked, the path that works on every transport, or,
// on a node with an RDMA registry (Config.Registry) and a slot staged in
// registered memory (RegisterDataPinned), an RDMA descriptor that the
// consumer reads with one GET. A consumer whose GET fails falls back to
// the chunked path once.
//
// Manager also implements msgrx.Stager: the messenger stages any
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
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/velo-go/velo/ext"
	"github.com/velo-go/velo/internal/msgerr"
	"github.com/velo-go/velo/internal/msgrx"
	"github.com/velo-go/velo/internal/rdma"
	"github.com/velo-go/velo/messenger"
	"github.com/velo-go/velo/metrics"
	"github.com/velo-go/velo/rendezvous/internal/rdmapath"
)

// DefaultThreshold is the payload size above which the messenger stages.
const DefaultThreshold = 256 << 10

// DefaultPayloadMax is the largest staged payload a node takes from a peer
// when its Config leaves PayloadMax at 0 (the reference has no limit by
// default; a stated size is the owner's word, so a node built with
// defaults must not take any size it is told).
const DefaultPayloadMax = 1 << 30

// A fetch buffer grows with the bytes that arrive (see sink): nothing
// before the first chunk, then firstGrowth (or the stated size, if
// smaller), then growFactor times its capacity each time a chunk lands
// past its end.
const (
	firstGrowth = 4 << 20
	growFactor  = 16
)

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
	// before anything of that size is allocated. 0 means DefaultPayloadMax
	// (1 GiB); a negative value means no limit. Under the limit the buffer
	// still grows with the bytes that arrive, not with the stated size.
	PayloadMax int64
	// Metrics, when set, receives the Rendezvous family.
	Metrics *metrics.VeloMetrics
	// Registry, when set, turns the RDMA path on (velo.WithRDMA builds it).
	Registry *rdma.Registry
	// RDMA tunes the RDMA path; it has no effect without Registry.
	RDMA RdmaRendezvousConfig
}

// Manager is one node's rendezvous: the owner's store and handlers, and
// the consumer's calls.
type Manager struct {
	m     *messenger.Messenger
	cfg   Config
	st    *store
	met   *metrics.RendezvousMetrics
	paths paths     // the path decision of every transfer; see path.go
	rdma  *rdmaSide // the RDMA path; nil without a registry (rdma.go)

	staged, fetched atomic.Int64 // transparent payloads staged here, and fetched by this node

	acquireHook atomic.Pointer[func()] // tests: runs at the start of every _rv_acquire answered
}

// ErrPayloadTooLarge is refused by PayloadMax; the error names both sizes.
var ErrPayloadTooLarge error = msgerr.NewSentinel(msgerr.ResourceExhausted, "rendezvous_payload_too_large", "rendezvous: staged payload over this node's limit")

// ErrNotFound: the owner has no such slot or lease (freed, expired, never staged).
// It keeps its identity across the wire (a messenger sentinel), as the
// other errors of this package do.
var ErrNotFound error = msgerr.NewSentinel(msgerr.NotFound, "rendezvous_not_found", "rendezvous: handle not found")

// ErrNotHolder: the lease or transfer named was handed to another peer.
// A handle is a capability (whoever holds it may take a lease on it), but
// a lease and its transfer belong to the peer whose acquire opened them:
// only that peer may pull, renew, detach or release them.
var ErrNotHolder error = msgerr.NewSentinel(msgerr.PermissionDenied, "rendezvous_not_holder", "rendezvous: the lease or transfer belongs to another peer")

// ErrTooManyLeases: the asker already holds MaxLeasesPerPeer leases on
// the owner; one must end (a release, a detach or its deadline) first. It
// keeps its identity across the wire.
var ErrTooManyLeases error = msgerr.NewSentinel(msgerr.ResourceExhausted, "rendezvous_too_many_leases", "rendezvous: too many leases held on the owner")

// ErrSizeMismatch: the owner sent other than the bytes it stated (a chunk
// shorter or longer than its share of total_len).
var ErrSizeMismatch error = msgerr.NewSentinel(msgerr.DataLoss, "rendezvous_size_mismatch", "rendezvous: the owner's bytes do not match the size it stated")

// Test seams: destination buffers that Get and Fetch allocated, and the
// capacity of those buffers in bytes.
var fetchAllocs, fetchAllocBytes atomic.Int64

// grownBytes counts the bytes a growing destination copied into its new
// buffer (a test seam, as fetchAllocs): the one copy of a byte in this
// process beside the kernel's.
var grownBytes atomic.Int64

// directChunks counts chunks a transport read straight into their place
// (a test seam, as fetchAllocs).
var directChunks atomic.Int64

// Test seams: payloads Stage copied, and withdraws of a lent payload that
// had to wait for the transport to finish with pull answers.
var stageCopies, lentWaits atomic.Int64

// New builds the manager and registers the owner's seven handlers on m.
func New(m *messenger.Messenger, cfg Config) (*Manager, error) {
	if cfg.Threshold == 0 {
		cfg.Threshold = DefaultThreshold
	}
	if cfg.Threshold < 0 || cfg.FetchTimeout < 0 {
		return nil, errors.New("rendezvous: negative threshold or fetch timeout")
	}
	switch {
	case cfg.PayloadMax == 0:
		cfg.PayloadMax = DefaultPayloadMax
	case cfg.PayloadMax < 0:
		cfg.PayloadMax = -1 // no limit
	}
	r := &Manager{m: m, cfg: cfg, st: newStore(), met: cfg.Metrics.Rendezvous()}
	r.st.self = m.WorkerID()
	if err := r.setupRDMA(cfg); err != nil {
		return nil, err
	}
	// A lost peer's leases would keep their slots staged, and count against
	// its bound, until their deadlines (Get asks for none). A GET from it
	// would wait for the backend to notice.
	msgrx.OnPeerLost(m, func(peer ext.InstanceID, _ error) {
		r.st.dropHolder(peer.WorkerID())
		if r.rdma != nil {
			r.rdma.gets.lose(peer.WorkerID())
		}
	})
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
		if err := msgrx.RegisterSystem(m, h); err != nil {
			return nil, err
		}
	}
	return r, nil
}

// Close stops the sweep and the RDMA lease reaper, and refuses every pull
// (and local Get) of a chunk from then on. Staged slots stay until the
// process lets them go.
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
	return r.registered(r.st.register(data, ttl), len(data))
}

// registerCopy is register for a copy made for the store.
func (r *Manager) registerCopy(data []byte, ttl time.Duration) DataHandle {
	return r.registered(r.st.registerOwned(data, ttl), len(data))
}

// registered counts a slot just staged and names it.
func (r *Manager) registered(id uint64, n int) DataHandle {
	r.met.Op(metrics.RvRegister, true, time.Time{})
	r.met.Bytes(metrics.RvRegister, n)
	return DataHandle{Hi: uint64(r.m.WorkerID()), Lo: id}
}

// mine checks that a handle names a slot of this owner.
func (r *Manager) mine(h DataHandle) error {
	if h.Owner() != r.m.WorkerID() {
		return fmt.Errorf("%w: %s is owned by worker %d, not this one", ErrNotFound, h, h.Hi)
	}
	return nil
}

// Who may ask: the owner may pass a handle to consumers by any means, so
// a handle is a capability, so _rv_metadata, _rv_acquire
// and _rv_ref serve whoever names a staged slot; its random 64-bit slot id
// is what a stranger cannot name. A lease and its transfer belong to the
// peer whose acquire opened them (the sender the messenger saw), so
// _rv_pull, _rv_lease_renew, _rv_detach and _rv_release serve that peer
// only. Every refusal is counted by operation and reason.

// decodeHandle reads a handle request and checks the handle is ours.
func (r *Manager) decodeHandle(op metrics.RvOp, b []byte) (DataHandle, error) {
	var req handleRequest
	err := decode(b, &req)
	if err == nil {
		err = r.mine(req.Handle)
	}
	if err != nil {
		r.met.Refused(op, metrics.RvMalformed)
	}
	return req.Handle, err
}

// notFound counts a request for a slot that is not staged here.
func (r *Manager) notFound(op metrics.RvOp, h DataHandle) error {
	r.met.Refused(op, metrics.RvNotFound)
	return fmt.Errorf("%w: %s", ErrNotFound, h)
}

func (r *Manager) onMetadata(c *messenger.Context) ([]byte, error) {
	h, err := r.decodeHandle(metrics.RvMetadata, c.Payload)
	if err != nil {
		return nil, err
	}
	md, ok := r.st.metadata(h.Lo)
	if !ok {
		return nil, r.notFound(metrics.RvMetadata, h)
	}
	return json.Marshal(md)
}

func (r *Manager) onAcquire(c *messenger.Context) ([]byte, error) {
	if f := r.acquireHook.Load(); f != nil {
		(*f)()
	}
	start := time.Now()
	req, err := r.decodeAcquire(c.Payload)
	h := req.Handle
	var ans acquireAnswer
	if err == nil {
		rd, hold, v := r.st.acquireSlot(h.Lo, leaseTimeout(c), c.SenderWorkerID(), r.rdma != nil)
		switch {
		case v != done:
			err = r.refuse(metrics.RvAcquire, v, h.String())
		default:
			var ok bool
			if ans, ok = r.answerAcquire(&rd, req.Rdma, hold); !ok {
				err = r.refuse(metrics.RvAcquire, notFound, h.String())
			}
		}
	}
	r.met.Op(metrics.RvAcquire, err == nil, start)
	if err != nil {
		return nil, err
	}
	return json.Marshal(ans)
}

// decodeAcquire reads an acquire request and checks the handle is ours.
func (r *Manager) decodeAcquire(b []byte) (acquireRequest, error) {
	var req acquireRequest
	err := decode(b, &req)
	if err == nil {
		err = r.mine(req.Handle)
	}
	if err != nil {
		r.met.Refused(metrics.RvAcquire, metrics.RvMalformed)
	}
	return req, err
}

// leaseTimeout is the deadline an acquire asks for (LeaseHeader), 0 for none.
func leaseTimeout(c *messenger.Context) time.Duration {
	h, err := c.Headers()
	if err != nil {
		return 0
	}
	v, ok := h[LeaseHeader]
	if !ok {
		return 0
	}
	ms, err := strconv.ParseUint(v, 10, 32)
	if err != nil {
		return 0
	}
	return time.Duration(ms) * time.Millisecond
}

func (r *Manager) onPull(c *messenger.Context) ([]byte, error) {
	req, ok := parsePullRequest(c.Payload)
	if !ok {
		if err := decode(c.Payload, &req); err != nil {
			r.met.Refused(metrics.RvPull, metrics.RvMalformed)
			return nil, err
		}
	}
	b, lent, v := r.st.take(req.TransferID, req.ChunkIndex, c.SenderWorkerID())
	r.met.Op(metrics.RvPull, v == done, time.Time{})
	if v != done {
		return nil, r.refuse(metrics.RvPull, v, fmt.Sprintf("chunk %d of transfer %d", req.ChunkIndex, req.TransferID))
	}
	if lent != nil {
		// The chunk is the registrant's or the lender's memory: the loan
		// learns when the transport is done with it (the reference take
		// took passes to the messenger), so that it is not given back
		// (Recycle) or withdrawn while the transport may still write it.
		msgrx.LendAnswer(c, lent)
	}
	r.met.Bytes(metrics.RvPull, len(b))
	return b, nil
}

// count records a refused lease or transfer request by its reason.
func (r *Manager) count(op metrics.RvOp, v verdict) {
	switch v {
	case notHolder:
		r.met.Refused(op, metrics.RvNotHolder)
	case mismatch:
		r.met.Refused(op, metrics.RvMismatch)
	case tooManyLeases:
		r.met.Refused(op, metrics.RvTooManyLeases)
	default:
		r.met.Refused(op, metrics.RvNotFound)
	}
}

// refuse counts a refused request and names it in an error that
// errors.Is matches (ErrNotFound or ErrNotHolder).
func (r *Manager) refuse(op metrics.RvOp, v verdict, what string) error {
	r.count(op, v)
	switch v {
	case notHolder:
		return fmt.Errorf("%w: %s", ErrNotHolder, what)
	case mismatch:
		return fmt.Errorf("%w: %s is on another slot", ErrNotFound, what)
	case tooManyLeases:
		return fmt.Errorf("%w: at most %d per peer and %d in all", ErrTooManyLeases, MaxLeasesPerPeer, MaxLeases)
	default:
		return fmt.Errorf("%w: %s", ErrNotFound, what)
	}
}

func (r *Manager) onRef(c *messenger.Context) ([]byte, error) {
	h, err := r.decodeHandle(metrics.RvRef, c.Payload)
	if err != nil {
		return nil, err
	}
	if !r.st.ref(h.Lo) {
		return nil, r.notFound(metrics.RvRef, h)
	}
	return nil, nil
}

// decodeLease reads a lease request and checks the handle is ours.
func (r *Manager) decodeLease(op metrics.RvOp, b []byte) (leaseRequest, bool) {
	var req leaseRequest
	if decode(b, &req) != nil || r.mine(req.Handle) != nil {
		r.met.Refused(op, metrics.RvMalformed)
		return req, false
	}
	return req, true
}

// onEnd serves _rv_detach and _rv_release. They are fire-and-forget, so a
// refusal has no one to answer: it is counted, and changes nothing.
func (r *Manager) onEnd(c *messenger.Context, deref bool) {
	op := metrics.RvDetach
	if deref {
		op = metrics.RvRelease
	}
	req, ok := r.decodeLease(op, c.Payload)
	if !ok {
		return
	}
	v := r.st.endLease(req.Handle.Lo, req.LeaseID, deref, c.SenderWorkerID())
	r.met.Op(op, v == done, time.Time{})
	if v != done {
		r.count(op, v)
	}
}

func (r *Manager) onRenew(c *messenger.Context) {
	req, ok := r.decodeLease(metrics.RvRenew, c.Payload)
	if !ok {
		return
	}
	v := r.st.renew(req.Handle.Lo, req.LeaseID, c.SenderWorkerID())
	r.met.Op(metrics.RvRenew, v == done, time.Time{})
	if v != done {
		r.count(metrics.RvRenew, v)
	}
}

// ---- the consumer ----

// owner finds the instance that staged h.
func (r *Manager) owner(h DataHandle) (ext.InstanceID, error) {
	id, ok := msgrx.InstanceOf(r.m, h.Owner())
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
	md, err := messenger.TypedUnary[Metadata](ctx, r.m, target, HandlerMetadata, handleRequest{Handle: h}, msgrx.WithOp("rendezvous metadata"))
	return md, fromRemote(err)
}

// Get pulls the payload of h and returns it with the lease it holds. End
// the lease with Detach (keep the reference) or Release. Get applies no
// size limit, but its buffer grows with the bytes that arrive, never
// ahead of them to the size the owner stated.
func (r *Manager) Get(ctx context.Context, h DataHandle) ([]byte, uint64, error) {
	start := time.Now()
	b, lease, err := r.get(ctx, h, 0, -1, nil)
	r.met.Op(metrics.RvGet, err == nil, start)
	r.met.Bytes(metrics.RvGet, len(b))
	return b, lease, err
}

// GetInto pulls the payload of h into dst, which must be at least as long,
// and returns the length and the lease.
func (r *Manager) GetInto(ctx context.Context, h DataHandle, dst []byte) (int, uint64, error) {
	start := time.Now()
	b, lease, err := r.get(ctx, h, 0, -1, dst)
	r.met.Op(metrics.RvGet, err == nil, start)
	r.met.Bytes(metrics.RvGet, len(b))
	return len(b), lease, err
}

// get acquires h, checks the stated size against max (< 0: none) and
// pulls every chunk, into into when it is not nil, else into a buffer
// that grows as chunks arrive. leaseTimeout > 0 asks the owner for a
// lease deadline. On an error after the acquire the lease is detached
// (released, when the size was refused and release is the rule).
func (r *Manager) get(ctx context.Context, h DataHandle, leaseTimeout time.Duration, max int64, into []byte) ([]byte, uint64, error) {
	if r.local(h) {
		return r.getLocal(h, max, into)
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
	tr := r.beginTransfer(h.Owner())
	var rd *ready
	// At most two acquires: one with the offer, and after a failed RDMA
	// answer one without, which the Transfer makes the last.
	for rd == nil {
		ans, err := r.acquire(ctx, target, h, tr.Offer(), opts)
		if err != nil {
			return nil, 0, err
		}
		if err := tr.Answer(ans.Rdma != nil); err != nil {
			// No offer went with this acquire, so an RDMA answer is the owner's fault.
			r.post(target, HandlerDetach, leaseRequest{Handle: h, LeaseID: ans.Rdma.LeaseID})
			r.met.Refused(metrics.RvGet, metrics.RvBadAnswer)
			return nil, 0, err
		}
		if ans.Ready != nil {
			rd = ans.Ready
			break
		}
		b, fellBack, err := r.getRDMA(ctx, target, h, ans.Rdma, max, into, &tr)
		if fellBack {
			continue
		}
		if err != nil {
			return nil, 0, err
		}
		tr.Done()
		return b, ans.Rdma.LeaseID, nil
	}
	if max >= 0 && rd.TotalLen > uint64(max) {
		r.post(target, HandlerRelease, leaseRequest{Handle: h, LeaseID: rd.LeaseID})
		r.met.Refused(metrics.RvGet, metrics.RvTooLarge)
		return nil, 0, fmt.Errorf("%w: the owner states %d bytes, the limit is %d", ErrPayloadTooLarge, rd.TotalLen, max)
	}
	dst, err := r.checkedSink(rd, into)
	if err != nil {
		r.post(target, HandlerDetach, leaseRequest{Handle: h, LeaseID: rd.LeaseID})
		return nil, 0, err
	}
	if err := r.pullAll(ctx, target, rd, dst); err != nil {
		r.post(target, HandlerDetach, leaseRequest{Handle: h, LeaseID: rd.LeaseID})
		if errors.Is(err, ErrSizeMismatch) {
			r.met.Refused(metrics.RvGet, metrics.RvSizeMismatch)
		}
		return nil, 0, err
	}
	tr.Done()
	return dst.bytes(), rd.LeaseID, nil
}

// acquire sends one _rv_acquire, with offer when not nil, and decodes the answer.
func (r *Manager) acquire(ctx context.Context, target ext.InstanceID, h DataHandle, offer *rdmapath.Offer, opts []messenger.CallOption) (acquireAnswer, error) {
	req := acquireRequest{Handle: h}
	if offer != nil {
		req.Rdma = &rdmaOffer{Backends: offer.Backends}
	}
	body, _ := json.Marshal(req)
	raw, err := r.m.Unary(ctx, target, HandlerAcquire, body, append(opts, opGet)...)
	if err != nil {
		return acquireAnswer{}, fromRemote(err)
	}
	var ans acquireAnswer
	if err := json.Unmarshal(raw, &ans); err != nil {
		r.met.Refused(metrics.RvGet, metrics.RvBadAnswer)
		return acquireAnswer{}, fmt.Errorf("rendezvous: decode the acquire answer: %w", err)
	}
	return ans, nil
}

// checkedSink checks the numbers of an answer and makes its destination.
func (r *Manager) checkedSink(rd *ready, into []byte) (*sink, error) {
	if err := checkReady(rd); err != nil {
		r.met.Refused(metrics.RvGet, metrics.RvBadAnswer)
		return nil, err
	}
	return newSink(int(rd.TotalLen), into)
}

// checkReady refuses an answer whose numbers do not agree.
func checkReady(rd *ready) error {
	if rd.TotalLen > uint64(int(^uint(0)>>1)) {
		return fmt.Errorf("%w: %d bytes do not fit in memory", ErrSizeMismatch, rd.TotalLen)
	}
	if rd.TotalLen == 0 && rd.ChunkCount == 0 {
		return nil
	}
	if rd.ChunkSize == 0 || uint64(rd.ChunkCount) != (rd.TotalLen+uint64(rd.ChunkSize)-1)/uint64(rd.ChunkSize) {
		return fmt.Errorf("%w: %d chunks of %d bytes do not make %d bytes", ErrSizeMismatch, rd.ChunkCount, rd.ChunkSize, rd.TotalLen)
	}
	return nil
}

// pullAll pulls every chunk into dst, pullWindow in flight. A transport
// that can reads each answer straight from the socket into its place in
// dst (the into of UnaryAsyncView); otherwise the answer is copied into
// dst on the transport's reader, from the read buffer. The reader then
// sends the next pull: no goroutine per chunk and no copy per byte beyond
// the kernel's (or one, the copying way), plus the copies of a grown
// buffer.
func (r *Manager) pullAll(ctx context.Context, target ext.InstanceID, rd *ready, dst *sink) error {
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
		body := appendPullRequest(make([]byte, 0, 64), rd.TransferID, i)
		off := uint64(i) * uint64(rd.ChunkSize)
		want := min(uint64(rd.ChunkSize), rd.TotalLen-off)
		// given is set on the reader that asks into, before the answer is
		// read, and read in the callback, which runs after that read ends.
		given := false
		into := func(n int) []byte {
			if uint64(n) != want {
				return nil // the usual path refuses it
			}
			b := dst.region(int(off), n)
			given = b != nil
			return b
		}
		err := msgrx.UnaryAsyncView(r.m, ctx, target, HandlerPull, body, into, func(b []byte, err error) {
			switch {
			case err != nil:
				err = pullFailed(i, err)
			case uint64(len(b)) != want:
				err = fmt.Errorf("%w: chunk %d has %d bytes, want %d", ErrSizeMismatch, i, len(b), want)
			case given:
				// The transport read the chunk into its place.
				directChunks.Add(1)
			default:
				dst.write(int(off), b)
			}
			if given {
				dst.fillDone()
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

// getLocal serves a handle this node owns without the network. The bytes
// are here, so their size is no one's word: the buffer is made at once.
func (r *Manager) getLocal(h DataHandle, max int64, into []byte) ([]byte, uint64, error) {
	self := r.m.WorkerID()
	rd, v := r.st.acquire(h.Lo, 0, self)
	if v != done {
		return nil, 0, r.refuse(metrics.RvGet, v, h.String())
	}
	if max >= 0 && rd.TotalLen > uint64(max) {
		r.st.endLease(h.Lo, rd.LeaseID, true, self)
		r.met.Refused(metrics.RvGet, metrics.RvTooLarge)
		return nil, 0, fmt.Errorf("%w: the owner states %d bytes, the limit is %d", ErrPayloadTooLarge, rd.TotalLen, max)
	}
	n := int(rd.TotalLen)
	var dst []byte
	if into != nil {
		if n > len(into) {
			r.st.endLease(h.Lo, rd.LeaseID, false, self)
			return nil, 0, fmt.Errorf("rendezvous: the payload of %d bytes does not fit a buffer of %d", n, len(into))
		}
		dst = into[:n]
	} else {
		dst = allocDest(n)[:n]
	}
	for i := range rd.ChunkCount {
		b, lent, v := r.st.take(rd.TransferID, i, self)
		if v != done { // withdrawn, or freed by its TTL, since the acquire
			r.st.endLease(h.Lo, rd.LeaseID, false, self)
			return nil, 0, r.refuse(metrics.RvGet, v, fmt.Sprintf("chunk %d of %s", i, h))
		}
		copy(dst[uint64(i)*uint64(rd.ChunkSize):], b)
		if lent != nil {
			lent.Release()
		}
	}
	return dst, rd.LeaseID, nil
}

// fromRemote gives a Rust owner's refusal its identity back. A Go owner's
// answers carry their reason (ErrNotFound and ErrNotHolder are messenger
// sentinels), but the reference answers with text only: a RemoteError
// without a reason whose text is one of its "not found" answers matches
// ErrNotFound with errors.Is.
func fromRemote(err error) error {
	var re *msgerr.RemoteError
	if err == nil || !errors.As(err, &re) || re.Reason != "" {
		return err
	}
	for _, prefix := range referenceNotFound {
		if strings.HasPrefix(re.Message, prefix) {
			return remoteRefusal{ErrNotFound, err}
		}
	}
	return err
}

// referenceNotFound are the reference owner's (velo 0.9) answers for a
// handle, lease or chunk it does not have.
var referenceNotFound = []string{
	"rendezvous handle not found",
	"chunk not found",
	"_rv_ref: handle not found",
}

// opGet names Get's calls in a remote failure's text.
var opGet = msgrx.WithOp("rendezvous get")

// pullFailed names a failed pull of chunk i: an owner's refusal (whose
// text names the chunk) as the operation, Get, and anything else, such as
// the deadline, with the chunk. (UnaryAsyncView takes no WithOp.)
func pullFailed(i uint32, err error) error {
	var re *msgerr.RemoteError
	if errors.As(err, &re) {
		return fromRemote(msgerr.NameOp(err, "rendezvous get"))
	}
	return fmt.Errorf("rendezvous: pull chunk %d: %w", i, err)
}

// remoteRefusal is a RemoteError that also matches a sentinel.
type remoteRefusal struct{ sentinel, err error }

func (e remoteRefusal) Error() string   { return e.err.Error() }
func (e remoteRefusal) Unwrap() []error { return []error{e.sentinel, e.err} }

// post sends a fire-and-forget control message without waiting.
func (r *Manager) post(target ext.InstanceID, handler string, body any) {
	b, _ := json.Marshal(body)
	_ = msgrx.Post(r.m, target, handler, b)
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
	_, err = r.m.Unary(ctx, target, HandlerRef, body, msgrx.WithOp("rendezvous ref"))
	return fromRemote(err)
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

// end ends a lease this node holds. On the owner itself, a lease that
// another peer holds is refused like a remote one (ErrNotHolder); a remote
// owner answers nothing (the messages are fire-and-forget) and ignores a
// lease that is not this node's.
func (r *Manager) end(ctx context.Context, h DataHandle, lease uint64, deref bool) error {
	op, name := metrics.RvDetach, HandlerDetach
	if deref {
		op, name = metrics.RvRelease, HandlerRelease
	}
	var err error
	if r.local(h) {
		if v := r.st.endLease(h.Lo, lease, deref, r.m.WorkerID()); v != done {
			err = r.refuse(op, v, fmt.Sprintf("lease %d of %s", lease, h))
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

// ---- msgrx.Stager ----

var _ msgrx.Stager = (*Manager)(nil)

// Threshold implements msgrx.Stager.
func (r *Manager) Threshold() int { return r.cfg.Threshold }

// FetchTimeout implements msgrx.Stager.
func (r *Manager) FetchTimeout() time.Duration { return r.cfg.FetchTimeout }

// PayloadMax is the largest staged payload this node takes from a peer,
// or -1 for no limit.
func (r *Manager) PayloadMax() int64 { return r.cfg.PayloadMax }

// Stage implements msgrx.Stager: a copy, since the call may return
// before the receiver fetched (fire-and-forget and asynchronous calls),
// and the caller reuses its buffer once the call returns.
//
// On an RDMA node the copy goes to registered memory when an arena is
// mapped already (it never maps one: a send must not stall on a
// registration), so that the receiver can GET it; else to plain memory,
// with the reason recorded (pool_exhausted when no arena is mapped).
func (r *Manager) Stage(payload []byte, ttl time.Duration) (string, error) {
	r.staged.Add(1)
	stageCopies.Add(1)
	if r.rdma != nil {
		if st := r.stagePinned(payload, r.rdma.reg.StageMapped); st != nil {
			return r.registered(r.st.addStaged(st, ttl), len(payload)).String(), nil
		}
	}
	return r.registerCopy(bytes.Clone(payload), ttl).String(), nil
}

var _ msgrx.Lender = (*Manager)(nil)

// StageLent implements msgrx.Lender: the slot is the caller's payload
// itself, for a call that blocks until its answer. Its pull answers go
// out with the slot's loan as their ext.Owner (msgrx.LendAnswer), so the
// transport says when it is done with each, and withdraw waits for that.
//
// What bounds the wait: only chunks already served wait, at most
// pullWindow of 512 KiB each (a transparent payload has one receiver and
// one lease). Each ends when the transport has written it into the socket
// or failed it: the socket takes it as fast as the receiver reads, and
// the transport fails it when the connection ends (a write error: the
// receiver crashed or reset it, or its host stopped answering; the peer is
// unregistered; the node shuts down, within its grace). That is the bound
// of every frame already handed to the transport, and the caller's
// context does not shorten it: a receiver that keeps its connection open
// but stops reading holds the call until the connection ends (it holds
// every later frame to that peer on the same lane too). A streamsock
// transport (tcp, uds) copies a frame of up to 64 KiB
// (frame.CoalesceThreshold) at Send and lets its owner go at once, so only
// the larger chunks (every full one) are waited for; those it keeps in its
// queue and writes straight from the caller's buffer (writev).
func (r *Manager) StageLent(payload []byte, ttl time.Duration) (string, func(), error) {
	r.staged.Add(1)
	id, l := r.st.registerLent(payload, ttl)
	h := r.registered(id, len(payload))
	var once sync.Once
	withdraw := func() {
		once.Do(func() {
			r.st.withdraw(id, l)
			l.Release() // the lender's reference
			select {
			case <-l.Idle():
			default:
				lentWaits.Add(1)
				<-l.Idle()
			}
		})
	}
	return h.String(), withdraw, nil
}

// Discard implements msgrx.Stager.
func (r *Manager) Discard(handle string) {
	if h, err := ParseHandle(handle); err == nil && r.local(h) {
		r.st.unref(h.Lo)
	}
}

// Fetch implements msgrx.Stager: get, then release (a transparent
// handle has one reference, its one receiver). A payload over PayloadMax
// is released unread; under it, the buffer grows with the bytes that
// arrive (see sink), so an owner that states more than it sends costs
// what it sent.
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
	b, lease, err := r.get(ctx, h, leaseTimeout, r.cfg.PayloadMax, nil)
	r.met.Op(metrics.RvGet, err == nil, start)
	if err != nil {
		return nil, err
	}
	r.met.Bytes(metrics.RvGet, len(b))
	r.fetched.Add(1)
	if r.local(h) {
		r.st.endLease(h.Lo, lease, true, r.m.WorkerID())
	} else if target, err := r.owner(h); err == nil {
		r.post(target, HandlerRelease, leaseRequest{Handle: h, LeaseID: lease})
	}
	r.met.Op(metrics.RvRelease, true, time.Time{})
	return b, nil
}
