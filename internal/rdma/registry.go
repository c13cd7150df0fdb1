package rdma

import (
	"context"
	"errors"
	"time"
	"unsafe"

	"github.com/velo-go/velo/metrics"
)

// This file fixes the registry's API so the rendezvous manager can be
// written against it while the registry is built; the bodies are stubs.

// PoolConfig is the book's RdmaPoolConfig. Zero fields take the defaults.
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
}

// Registry owns this node's registered memory.
type Registry struct{}

// NewRegistry returns a registry over b. met may be nil.
func NewRegistry(b Backend, cfg Config, met *metrics.RendezvousMetrics) *Registry {
	return &Registry{}
}

// Backend is the backend the registry maps with.
func (r *Registry) Backend() Backend { return nil }

// StagePinned copies data into pool memory, mapping an arena when none
// has room. On failure it returns nil and the reason (budget or
// pool_exhausted); the caller stages in plain memory instead.
func (r *Registry) StagePinned(data []byte) (*Staging, metrics.RdmaPathReason) {
	return nil, metrics.RdmaPoolExhausted
}

// StageMapped is StagePinned for transparent staging: it uses only arenas
// already mapped and never maps one.
func (r *Registry) StageMapped(data []byte) (*Staging, metrics.RdmaPathReason) {
	return nil, metrics.RdmaPoolExhausted
}

// StageInRegion stages n bytes at off (relative to the registered
// pointer) of an external region, with no copy.
func (r *Registry) StageInRegion(g *RegionGuard, off, n int) (*Staging, error) {
	return nil, errNotBuilt
}

// RegisterOwned registers buf, which the registry holds until an unmap is
// confirmed (RegionGuard.UnregisterOwned gives it back).
func (r *Registry) RegisterOwned(buf []byte) (*RegionGuard, error) { return nil, errNotBuilt }

// RegisterExternal registers n bytes at ptr that the caller owns; the
// caller keeps them valid until the guard's Deregistered is closed.
func (r *Registry) RegisterExternal(ptr unsafe.Pointer, n int) (*RegionGuard, error) {
	return nil, errNotBuilt
}

// AllocDest reserves n bytes of pool memory as a GET destination.
func (r *Registry) AllocDest(n int) (*PinnedBuf, error) { return nil, errNotBuilt }

// Draining reports whether Shutdown has begun.
func (r *Registry) Draining() bool { return false }

// Shutdown runs the sweep: gate new registrations, drain in-progress ones
// and regions' in-flight work (bounded by ctx and ShutdownTimeout), then
// unmap every region and arena.
func (r *Registry) Shutdown(ctx context.Context) error { return nil }

// Staging is one slot's registered bytes.
type Staging struct{}

// Len is the staged size.
func (s *Staging) Len() int { return 0 }

// Remote describes the staging for one GET, with a freshly packed key; it
// fails when the staging is gone (an external region deregistered).
func (s *Staging) Remote() (addr, n, generation uint64, rkey []byte, err error) {
	return 0, 0, 0, nil, errNotBuilt
}

// ReadAt copies staged bytes out for the chunked path (for an external
// region, under its copy gate).
func (s *Staging) ReadAt(p []byte, off int64) (int, error) { return 0, errNotBuilt }

// Release frees the staging.
func (s *Staging) Release() {}

// PinnedBuf is pool memory held for a GET destination.
type PinnedBuf struct{}

// Bytes is the buffer.
func (p *PinnedBuf) Bytes() []byte { return nil }

// Release returns the buffer to the pool.
func (p *PinnedBuf) Release() {}

// RegionGuard is the caller's hold on an external registration.
type RegionGuard struct{}

var errNotBuilt = errors.New("rdma: registry not built yet")
