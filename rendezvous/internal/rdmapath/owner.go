package rdmapath

import (
	"math"
	"slices"
	"time"

	"github.com/velo-go/velo/metrics"
)

// Reason is the reason label of velo_rendezvous_rdma_path_total for one
// decision; metrics.RdmaOK is the RDMA path, every other value chunked.
type Reason = metrics.RdmaPathReason

// BackendNameUCX is the key of the transport, and the name in an offer,
// of the UCX backend.
const BackendNameUCX = "ucx"

// Defaults of the book's RdmaRendezvousConfig.
const (
	DefaultMinBytes     = 64 << 10
	DefaultLeaseTimeout = 30 * time.Second
)

// Offer is what a consumer sends with an acquire: the backends it can GET
// with. A nil *Offer is no offer.
type Offer struct {
	Backends []string
}

// Region is the backend's view of one slot's registered staging.
type Region interface {
	// Descriptor describes the staging for a GET, with a freshly packed
	// key, or fails when the staging is gone (an external region
	// deregistered under the slot).
	Descriptor() (Descriptor, error)
}

// Backend is what an RDMA registry (the future UCX backend) tells the
// owner's checks.
type Backend interface {
	// Name is the backend an offer must name ("ucx").
	Name() string
	// Draining reports whether the owner has begun its drain; the
	// shutdown sweep after it frees pinned memory.
	Draining() bool
}

// SlotFacts are the facts about the slot an acquire names.
type SlotFacts struct {
	Len    uint64 // the payload's size
	Region Region // the registered staging; nil when the slot is in plain memory
}

// Owner is the owner's side of the path decision. The zero value has no
// RDMA registry, so every decision is chunked.
type Owner struct {
	Backend      Backend       // nil: no RDMA registry on this instance
	Disabled     bool          // the kill switch
	MinBytes     uint64        // rdma_min_bytes
	LeaseTimeout time.Duration // the deadline of an RDMA lease; see ClampLeaseTimeout
}

// Decide runs the owner's eight checks in the book's order and returns the
// first refusal's reason, or metrics.RdmaOK with the descriptor appended
// to dst. Facts about the configuration and the slot come before the
// drain (check 7), so draining counts only the acquires the drain changed.
// Nothing here touches the network: a refused acquire costs its request.
func (o *Owner) Decide(offer *Offer, slot SlotFacts, dst []byte) ([]byte, Reason) {
	switch {
	case offer == nil: // 1
		return dst, metrics.RdmaNoOffer
	case o.Backend == nil: // 2
		return dst, metrics.RdmaNotConfigured
	case o.Disabled: // 3
		return dst, metrics.RdmaKillSwitch
	case slot.Region == nil: // 4
		return dst, metrics.RdmaNotPinned
	case slot.Len < o.MinBytes: // 5
		return dst, metrics.RdmaBelowMin
	case !slices.Contains(offer.Backends, o.Backend.Name()): // 6
		return dst, metrics.RdmaNoOffer
	case o.Backend.Draining(): // 7
		return dst, metrics.RdmaDraining
	}
	d, err := slot.Region.Descriptor() // 8
	if err != nil || d.Len != slot.Len {
		return dst, metrics.RdmaNotPinned
	}
	out, err := d.Append(dst)
	if err != nil {
		return dst, metrics.RdmaNotPinned
	}
	return out, metrics.RdmaOK
}

// ClampLeaseTimeout is the lease deadline an owner arms and states: on the
// wire 0 means none, so a sub-millisecond timeout rises to 1 ms rather
// than arm a deadline the consumer was told does not exist.
func ClampLeaseTimeout(d time.Duration) time.Duration {
	return max(d, time.Millisecond)
}

// ReapEvery is the owner's lease-reaper period: half the lease timeout,
// at least 10 ms.
func ReapEvery(leaseTimeout time.Duration) time.Duration {
	return max(leaseTimeout/2, 10*time.Millisecond)
}

// RenewEvery is how often a consumer renews an RDMA lease while its GET
// runs, from the lease_timeout_ms the owner stated: half of it, at least
// 5 ms; 0 (no deadline) starts no renewals.
func RenewEvery(leaseTimeoutMS uint64) time.Duration {
	if leaseTimeoutMS == 0 {
		return 0
	}
	ms := min(leaseTimeoutMS, uint64(math.MaxInt64/int64(time.Millisecond))) // a hostile value must not wrap
	return max(time.Duration(ms)*time.Millisecond/2, 5*time.Millisecond)
}
