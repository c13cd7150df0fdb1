package rendezvous

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"sync/atomic"
	"time"
	"unsafe"

	"github.com/velo-go/velo/internal/msgerr"
	"github.com/velo-go/velo/internal/rdma"
	"github.com/velo-go/velo/metrics"
	"github.com/velo-go/velo/rendezvous/internal/rdmapath"
)

// RdmaRendezvousConfig tunes the RDMA path of a Manager that has an RDMA
// registry (Config.Registry). Zero fields take the defaults.
type RdmaRendezvousConfig struct {
	// MinBytes: pinned slots smaller than this answer chunked (default
	// 64 KiB). Keep it at or under Threshold, so that a transparently
	// staged payload is large enough for the RDMA path.
	MinBytes int64
	// Disabled turns the RDMA path off on both roles: the book's
	// enabled = false. The environment variable
	// VELO_RDMA_RENDEZVOUS_DISABLE (1, true, yes or on, in any case) does
	// the same; New reads it once.
	Disabled bool
	// LeaseTimeout is the deadline of a lease answered with a descriptor
	// (default 30 s; at least 1 ms). The consumer renews it every half
	// timeout while its GET runs; the owner reaps one silent for longer.
	LeaseTimeout time.Duration
}

// RegionGuard is the caller's hold on memory it registered for RDMA
// (RegisterExternalMemory, RegisterOwned); see RegisterDataInRegion.
type RegionGuard = rdma.RegionGuard

// ErrRdmaNotConfigured: an RDMA-only call on a node with no RDMA registry.
var ErrRdmaNotConfigured error = msgerr.NewSentinel(msgerr.FailedPrecondition, "rendezvous_rdma_not_configured", "rendezvous: this node has no RDMA registry")

// rdmaSide is a Manager's RDMA path; nil without a registry.
type rdmaSide struct {
	reg      *rdma.Registry
	be       rdma.Backend
	code     uint8 // the descriptor's backend byte
	disabled bool  // the kill switch, read once at New
	draining atomic.Bool
	gets     getWatch // GETs in flight, by owner
}

// setupRDMA fills in the RDMA path from cfg, once, in New.
func (r *Manager) setupRDMA(cfg Config) error {
	c := cfg.RDMA
	if c.MinBytes < 0 || c.LeaseTimeout < 0 {
		return errors.New("rendezvous: negative RDMA MinBytes or LeaseTimeout")
	}
	if cfg.Registry == nil {
		return nil
	}
	be := cfg.Registry.Backend()
	if be == nil {
		return errors.New("rendezvous: the RDMA registry has no backend")
	}
	if be.Name() != rdmapath.BackendNameUCX {
		return fmt.Errorf("rendezvous: RDMA backend %q has no descriptor code", be.Name())
	}
	if c.MinBytes == 0 {
		c.MinBytes = rdmapath.DefaultMinBytes
	}
	if c.LeaseTimeout == 0 {
		c.LeaseTimeout = rdmapath.DefaultLeaseTimeout
	}
	lease := rdmapath.ClampLeaseTimeout(c.LeaseTimeout)
	// Read once: one process must not answer half its acquires one way.
	disabled := c.Disabled || rdmapath.KillSwitch(os.Getenv(rdmapath.KillSwitchEnv))
	side := &rdmaSide{reg: cfg.Registry, be: be, code: rdmapath.BackendUCX, disabled: disabled}
	r.rdma = side
	r.paths.owner = rdmapath.Owner{Backend: ownerView{side}, Disabled: disabled, MinBytes: uint64(c.MinBytes), LeaseTimeout: lease}
	r.paths.consumer = rdmapath.Consumer{Backend: be.Name(), Disabled: disabled}
	r.st.reapEvery = rdmapath.ReapEvery(lease)
	if r.met != nil {
		r.st.onReap = r.met.LeasesReaped
	}
	return nil
}

// ownerView is what the owner's checks ask of the registry.
type ownerView struct{ s *rdmaSide }

func (v ownerView) Name() string { return v.s.be.Name() }

// Draining: BeginDrain was called, or the registry began its sweep.
func (v ownerView) Draining() bool { return v.s.draining.Load() || v.s.reg.Draining() }

// stagingRegion is a slot's staging as the owner's checks see it.
type stagingRegion struct {
	st   stagingMem
	code uint8
}

func (g stagingRegion) Descriptor() (rdmapath.Descriptor, error) {
	addr, n, gen, rkey, err := g.st.Remote()
	if err != nil {
		return rdmapath.Descriptor{}, err
	}
	return rdmapath.Descriptor{Backend: g.code, Generation: gen, Addr: addr, Len: n, Rkey: rkey}, nil
}

// RegisterDataPinned stages a copy of data in registered memory, which a
// peer with the RDMA path reads with one GET, and returns its handle with
// refcount 1. It never fails: when no registered memory is to be had it
// stages the copy in plain memory, and velo_rendezvous_rdma_path_total
// records why (kill_switch, budget or pool_exhausted). A node with no
// RDMA registry, and an empty payload, stage in plain memory with no
// record. Either way the call copies once, so data may be reused as soon
// as it returns. Peers without the RDMA path read the slot chunked.
func (r *Manager) RegisterDataPinned(data []byte) DataHandle {
	if r.rdma != nil {
		if st := r.stagePinned(data, r.rdma.reg.StagePinned); st != nil {
			return r.registered(r.st.addStaged(st, 0), len(data))
		}
	}
	return r.registerCopy(bytes.Clone(data), 0)
}

// stagePinned stages data with stage, or returns nil (recording why)
// when it must go to plain memory.
func (r *Manager) stagePinned(data []byte, stage func([]byte) (*rdma.Staging, metrics.RdmaPathReason)) stagingMem {
	if len(data) == 0 { // a GET would have nothing to move
		return nil
	}
	if r.rdma.disabled {
		r.met.PathDecision(metrics.RdmaKillSwitch)
		return nil
	}
	st, why := stage(data)
	if st == nil {
		r.met.PathDecision(why)
		return nil
	}
	return st
}

// RegisterDataInRegion stages n bytes at off of memory registered with
// RegisterExternalMemory or RegisterOwned, with no copy; off is relative
// to the registered pointer. The slot holds the region in use until it is
// freed, so the guard's unregister waits for it. The kill switch does not
// apply here (it only turns descriptors off).
func (r *Manager) RegisterDataInRegion(g *RegionGuard, off, n int) (DataHandle, error) {
	if r.rdma == nil {
		return DataHandle{}, ErrRdmaNotConfigured
	}
	st, err := r.rdma.reg.StageInRegion(g, off, n)
	if err != nil {
		return DataHandle{}, err
	}
	return r.registered(r.st.addStaged(st, 0), n), nil
}

// RegisterExternalMemory registers n bytes at ptr, which the caller owns
// and keeps valid (not freed, moved or remapped) until the guard reports
// the memory deregistered. Registered memory is remotely writable by any
// peer holding its key, whole pages around the range included.
func (r *Manager) RegisterExternalMemory(ptr unsafe.Pointer, n int) (*RegionGuard, error) {
	if r.rdma == nil {
		return nil, ErrRdmaNotConfigured
	}
	return r.rdma.reg.RegisterExternal(ptr, n)
}

// RegisterOwned registers buf, which the registry holds until its unmap is
// confirmed; the caller must not touch buf until the guard gives it back.
func (r *Manager) RegisterOwned(buf []byte) (*RegionGuard, error) {
	if r.rdma == nil {
		return nil, ErrRdmaNotConfigured
	}
	return r.rdma.reg.RegisterOwned(buf)
}

// BeginDrain makes this owner answer every later acquire chunked (reason
// draining), as its shutdown is about to free the registered memory.
// Pulls of staged payloads go on.
func (r *Manager) BeginDrain() {
	if r.rdma != nil {
		r.rdma.draining.Store(true)
	}
}

// DemotePinned copies every pinned slot into plain memory and lets its
// registered memory go, so that chunked pulls admitted before the
// shutdown finish after the registry has unmapped. It returns how many
// slots it moved. Shutdown runs it between BeginDrain and the registry's
// sweep. The copies are memory-bound, so it takes no deadline; the
// registry's sweep after it does.
func (r *Manager) DemotePinned() int {
	if r.rdma == nil {
		return 0
	}
	r.BeginDrain()
	return r.st.demote()
}
