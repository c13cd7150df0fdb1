package metrics

import (
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// RvOp is the operation label of the Rendezvous family.
type RvOp uint8

const (
	RvRegister RvOp = iota // a payload staged on this owner
	RvMetadata             // a consumer asked for metadata
	RvGet                  // a consumer pulled a payload (acquire and every chunk)
	RvRef                  // a consumer added a reference
	RvDetach               // a consumer dropped its lease
	RvRelease              // a consumer dropped its lease and a reference
	RvAcquire              // the owner answered an _rv_acquire
	RvPull                 // the owner answered an _rv_pull
	RvExpire               // the owner's sweep ended a slot or a lease past its deadline
	RvRenew                // the owner took an _rv_lease_renew
	NumRvOps
)

var rvOpNames = [NumRvOps]string{"register", "metadata", "get", "ref", "detach", "release", "acquire", "pull", "expire", "renew"}

// RvRefusal is the reason label of velo_rendezvous_refusals_total: why a
// request or an answer was refused.
type RvRefusal uint8

const (
	RvNotFound      RvRefusal = iota // owner: no such slot, lease or transfer (freed, expired, never given out)
	RvNotHolder                      // owner: the lease or transfer was handed to another peer
	RvMismatch                       // owner: the lease is on another slot than the handle names
	RvMalformed                      // owner: a body that does not decode, or a handle of another owner
	RvTooLarge                       // consumer: a stated size over StagedPayloadMax
	RvSizeMismatch                   // consumer: the owner sent other than the bytes it stated
	RvBadAnswer                      // consumer: an acquire answer whose numbers disagree, or RDMA unasked
	RvTooManyLeases                  // owner: the asker holds MaxLeasesPerPeer leases already
	NumRvRefusals
)

var rvRefusalNames = [NumRvRefusals]string{"not_found", "not_holder", "mismatch", "malformed", "too_large", "size_mismatch", "bad_answer", "too_many_leases"}

func (r RvRefusal) String() string {
	if r < NumRvRefusals {
		return rvRefusalNames[r]
	}
	return "unknown"
}

func (o RvOp) String() string {
	if o < NumRvOps {
		return rvOpNames[o]
	}
	return "unknown"
}

// RendezvousMetrics is the handle of the Rendezvous family, from
// VeloMetrics.Rendezvous. The rendezvous package holds a pointer and
// records nothing when it is nil. active_slots exists once it is built;
// every other series is bound the first time it records (see lazy.go),
// since a node that never stages a payload meets none of its operations.
type RendezvousMetrics struct {
	ops      [NumRvOps][2]atomic.Pointer[opSeries]
	bytes    [NumRvOps]atomic.Pointer[counterSeries]
	opsVec   *prometheus.CounterVec
	durVec   *prometheus.HistogramVec
	bytesVec *prometheus.CounterVec
	active   prometheus.Gauge
	// refused is bound on each refusal: refusals are off the data path.
	refused *prometheus.CounterVec
	eager   [numEagerReasons]prometheus.Counter               // rdma_path_total, bound at build
	paths   [NumRdmaPathReasons]atomic.Pointer[counterSeries] // the rest, bound on first use
	pathVec *prometheus.CounterVec
	rdma    *rdmaFamilies  // the other RDMA families (rdma_get.go)
	reg     *rdmaRegSeries // the registry's series (rdma_registry.go)
}

// Rendezvous returns the handle of the Rendezvous family (the same one on
// every call); nil on a nil *VeloMetrics.
func (m *VeloMetrics) Rendezvous() *RendezvousMetrics {
	if m == nil {
		return nil
	}
	m.rvOnce.Do(func() {
		m.rv = &RendezvousMetrics{
			opsVec: m.rvOps, durVec: m.rvDur, bytesVec: m.rvBytes,
			active: m.rvActive, refused: m.rvRefused,
			eager: m.rdma.eager, pathVec: m.rdma.path,
			reg: newRdmaRegSeries(&m.rdma), rdma: &m.rdma,
		}
	})
	return m.rv
}

// Op records one operation that started at start; a zero start records no duration.
func (r *RendezvousMetrics) Op(op RvOp, ok bool, start time.Time) {
	if r == nil || op >= NumRvOps {
		return
	}
	oc := outcomeIndex(ok)
	s := r.ops[op][oc].Load()
	if s == nil {
		s = bindOp(&r.ops[op][oc], r.opsVec, r.durVec, op.String(), streamOutcomeNames[oc])
	}
	s.count.Inc()
	if !start.IsZero() {
		s.dur.Observe(time.Since(start).Seconds())
	}
}

// Bytes counts payload bytes moved by op.
func (r *RendezvousMetrics) Bytes(op RvOp, n int) {
	if r == nil || op >= NumRvOps || n <= 0 {
		return
	}
	s := r.bytes[op].Load()
	if s == nil {
		s = bindCounter(&r.bytes[op], r.bytesVec, op.String())
	}
	s.c.Add(float64(n))
}

// Refused counts one request or answer of op refused for why.
func (r *RendezvousMetrics) Refused(op RvOp, why RvRefusal) {
	if r != nil && op < NumRvOps && why < NumRvRefusals {
		r.refused.WithLabelValues(op.String(), why.String()).Inc()
	}
}

// ActiveSlots sets the number of staged slots.
func (r *RendezvousMetrics) ActiveSlots(n int) {
	if r != nil {
		r.active.Set(float64(n))
	}
}

// ChunkedPath counts one decision for the chunked path, for why (RdmaOK
// is not a chunked reason and is ignored here).
func (r *RendezvousMetrics) ChunkedPath(why RdmaPathReason) {
	if why != RdmaOK {
		r.PathDecision(why)
	}
}

// PathDecision counts one path decision of velo_rendezvous_rdma_path_total:
// path="rdma",reason="ok" for RdmaOK, path="chunked" with the reason
// otherwise. The owner records as it answers an acquire, the consumer as
// it builds its offer, after a failure and when a GET completes. The
// series this build records today are bound when the handle is built; the
// others on their first record. Either way a record is an atomic add.
func (r *RendezvousMetrics) PathDecision(why RdmaPathReason) {
	if r == nil || why >= NumRdmaPathReasons {
		return
	}
	if why < numEagerReasons {
		r.eager[why].Inc()
		return
	}
	s := r.paths[why].Load()
	if s == nil {
		s = bindCounter(&r.paths[why], r.pathVec, why.Path(), why.String())
	}
	s.c.Inc()
}
