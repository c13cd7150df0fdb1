package rdma

import (
	"log/slog"
	"os"
	"runtime"
	"sync"
	"sync/atomic"
	"time"

	"github.com/velo-go/velo/metrics"
)

// PoolConfig is the book's RdmaPoolConfig. Zero (or negative) fields take
// the defaults; sizes are rounded up to whole pages.
type PoolConfig struct {
	InitialArenaBytes     int64         // first pooled arena; default 64 MiB
	MaxArenaBytes         int64         // largest pooled arena; default 1 GiB
	DedicatedArenaMin     int64         // requests at or above get their own arena; default 64 MiB
	RegisteredBytesBudget int64         // cap on mapped bytes, pool and external; default 1 GiB
	ArenaReclaimAfter     time.Duration // unmap empty pooled arenas after this long; 0: never
	RetainArenaBytes      int64         // warm floor reclamation keeps; default 64 MiB
}

// Config configures a Registry.
type Config struct {
	Pool             PoolConfig
	ShutdownTimeout  time.Duration // bound of the shutdown sweep; default 30 s
	DropDeregTimeout time.Duration // bound of a dropped guard's deregistration; default 30 s
	Log              *slog.Logger  // warnings and leaks; nil: slog.Default()
}

// Defaults of Config.
const (
	DefaultInitialArenaBytes     = 64 << 20
	DefaultMaxArenaBytes         = 1 << 30
	DefaultDedicatedArenaMin     = 64 << 20
	DefaultRegisteredBytesBudget = 1 << 30
	DefaultRetainArenaBytes      = 64 << 20
	DefaultShutdownTimeout       = 30 * time.Second
	DefaultDropDeregTimeout      = 30 * time.Second
)

// granuleBytes is the unit of a pooled arena's suballocator.
const granuleBytes = 4096

var pageSize = int64(os.Getpagesize())

// maxArenaBytes keeps granule offsets within the suballocator's int32 links.
const maxArenaBytes = (1 << 31) * granuleBytes

// Registry owns this node's registered memory: an arena pool that
// stagings and GET destinations come from, the external regions callers
// register, the registered-bytes budget over both, and the shutdown sweep
// that unmaps all of it.
//
// Lifecycle. A pooled arena is mapped by the staging or destination that
// first needs room (never by StageMapped), lives until the shutdown sweep
// or, with ArenaReclaimAfter, until it has been empty that long; a
// dedicated arena lives exactly as long as its one allocation. An external
// region lives from RegisterExternal or RegisterOwned to its Unregister or
// the sweep. Memory is only ever unmapped from the process after the
// backend confirmed the unmap and nothing in it is held; a refused unmap
// leaks, on purpose, until AfterBackendClose.
//
// Goroutines: none of its own, except the reclamation timer's callback
// (only while an empty arena could be reclaimed) and one per dropped
// RegionGuard while its background deregistration runs.
//
// Locks, in order: grow (one pool growth at a time, held across its map),
// then mu (the pool, the budget and the sets of registrations; never held
// across a Backend call), then a registration's gate (never taken with mu
// held).
type Registry struct {
	b   Backend
	cfg Config
	met *metrics.RendezvousMetrics
	log *slog.Logger

	flight *flight       // in-progress registrations and allocations
	gen    atomic.Uint64 // registration generation
	grow   sync.Mutex    // one pool growth at a time, so racing stagers map one arena, not two

	mu         sync.Mutex
	pooled     []*arena            // live pooled arenas, oldest first
	arenas     map[*arena]struct{} // every arena not yet gone (pooled and dedicated)
	regions    map[*RegionGuard]struct{}
	registered int64         // budget bytes: effective ranges of every mapping not confirmed unmapped
	mappings   int           // mappings the backend holds
	draining   bool          // Shutdown has begun (also in flight's gate)
	swept      bool          // Shutdown has collected every registration
	shut       chan struct{} // closed when Shutdown returns
	forced     chan struct{} // closed when the sweep begins: region drains stop waiting
	shutErr    error
	reclaim    *time.Timer // armed only while an empty pooled arena could be reclaimed
	reclaimGen uint64      // tells a stale timer callback from the armed one
	bg         sync.WaitGroup

	// Registrations whose unmap the backend refused: still counted, still
	// held, until AfterBackendClose.
	leakedArenas  []*arena
	leakedRegions []*RegionGuard

	leak *leakWatch

	copyHook  func() // tests: runs inside a region copy, under its gate
	latchHook func() // tests: runs before a region's latch
}

// NewRegistry returns a registry over b. met may be nil.
func NewRegistry(b Backend, cfg Config, met *metrics.RendezvousMetrics) *Registry {
	cfg = cfg.withDefaults()
	r := &Registry{
		b: b, cfg: cfg, met: met, log: cfg.Log,
		flight:  newFlight(),
		arenas:  map[*arena]struct{}{},
		regions: map[*RegionGuard]struct{}{},
		forced:  make(chan struct{}),
		leak:    &leakWatch{log: cfg.Log},
	}
	runtime.AddCleanup(r, (*leakWatch).collected, r.leak)
	return r
}

func (c Config) withDefaults() Config {
	p := &c.Pool
	p.InitialArenaBytes = pages(orDefault(p.InitialArenaBytes, DefaultInitialArenaBytes))
	p.MaxArenaBytes = pages(orDefault(p.MaxArenaBytes, DefaultMaxArenaBytes))
	p.MaxArenaBytes = min(max(p.MaxArenaBytes, p.InitialArenaBytes), maxArenaBytes)
	p.InitialArenaBytes = min(p.InitialArenaBytes, p.MaxArenaBytes)
	p.DedicatedArenaMin = orDefault(p.DedicatedArenaMin, DefaultDedicatedArenaMin)
	p.RegisteredBytesBudget = orDefault(p.RegisteredBytesBudget, DefaultRegisteredBytesBudget)
	p.RetainArenaBytes = orDefault(p.RetainArenaBytes, DefaultRetainArenaBytes)
	p.ArenaReclaimAfter = max(p.ArenaReclaimAfter, 0)
	if c.ShutdownTimeout <= 0 {
		c.ShutdownTimeout = DefaultShutdownTimeout
	}
	if c.DropDeregTimeout <= 0 {
		c.DropDeregTimeout = DefaultDropDeregTimeout
	}
	if c.Log == nil {
		c.Log = slog.Default()
	}
	return c
}

func orDefault(v, d int64) int64 {
	if v <= 0 {
		return d
	}
	return v
}

// pages rounds n up to whole pages (and so to whole granules: a page is
// a multiple of 4 KiB on every platform Go runs on).
func pages(n int64) int64 { return (n + pageSize - 1) / pageSize * pageSize }

// Backend is the backend the registry maps with.
func (r *Registry) Backend() Backend { return r.b }

// Draining reports whether Shutdown has begun.
func (r *Registry) Draining() bool { return r.flight.closed() }

// Stats is a snapshot of the registry, for tests and diagnostics.
type Stats struct {
	RegisteredBytes int64   // bytes counted against the budget
	Mappings        int     // registrations the backend holds
	PooledArenas    []int64 // sizes of the live pooled arenas, oldest first
	DedicatedArenas int
	Regions         int // external regions not yet unregistered
}

// Stats reports the registry's state now.
func (r *Registry) Stats() Stats {
	r.mu.Lock()
	defer r.mu.Unlock()
	s := Stats{RegisteredBytes: r.registered, Mappings: r.mappings, Regions: len(r.regions)}
	for _, a := range r.pooled {
		s.PooledArenas = append(s.PooledArenas, a.size)
	}
	for a := range r.arenas {
		if a.dedicated && a.state == stateLive {
			s.DedicatedArenas++
		}
	}
	return s
}

// accountLocked moves the budget and the mapping count, and reports both.
func (r *Registry) accountLocked(bytes int64, maps int) {
	r.registered += bytes
	r.mappings += maps
	r.leak.mappings.Store(int64(r.mappings))
	r.met.RdmaRegisteredBytes(r.registered)
	r.met.RdmaLiveRegions(r.mappings)
}

// leakWatch outlives a Registry that is dropped without Shutdown, to say
// that its registrations leak: their pages stay mapped and pinned, since
// freeing what the backend may still pin is the one thing worse.
type leakWatch struct {
	mappings atomic.Int64
	log      *slog.Logger
}

func (w *leakWatch) collected() {
	if n := w.mappings.Load(); n > 0 {
		w.log.Error("rdma: registry dropped without Shutdown; its registrations leak", "mappings", n)
	}
}
