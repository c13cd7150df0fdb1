package metrics

import (
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

// RendezvousMetrics is the pre-bound handle of the Rendezvous family, from
// VeloMetrics.Rendezvous. The rendezvous package holds a pointer and
// records nothing when it is nil.
type RendezvousMetrics struct {
	ops    [NumRvOps][2]prometheus.Counter
	dur    [NumRvOps][2]prometheus.Observer
	bytes  [NumRvOps]prometheus.Counter
	active prometheus.Gauge
	// refused is bound on first use: refusals are off the data path, and
	// most of the operation × reason pairs never occur.
	refused *prometheus.CounterVec
}

// Rendezvous returns the handle of the Rendezvous family (the same one on
// every call); nil on a nil *VeloMetrics.
func (m *VeloMetrics) Rendezvous() *RendezvousMetrics {
	if m == nil {
		return nil
	}
	m.rvOnce.Do(func() {
		r := &RendezvousMetrics{active: m.rvActive, refused: m.rvRefused}
		for o := range NumRvOps {
			for oc := range 2 {
				r.ops[o][oc] = m.rvOps.WithLabelValues(RvOp(o).String(), streamOutcomeNames[oc])
				r.dur[o][oc] = m.rvDur.WithLabelValues(RvOp(o).String(), streamOutcomeNames[oc])
			}
			r.bytes[o] = m.rvBytes.WithLabelValues(RvOp(o).String())
		}
		m.rv = r
	})
	return m.rv
}

// Op records one operation that started at start; a zero start records no duration.
func (r *RendezvousMetrics) Op(op RvOp, ok bool, start time.Time) {
	if r == nil || op >= NumRvOps {
		return
	}
	oc := outcomeIndex(ok)
	r.ops[op][oc].Inc()
	if !start.IsZero() {
		r.dur[op][oc].Observe(time.Since(start).Seconds())
	}
}

// Bytes counts payload bytes moved by op.
func (r *RendezvousMetrics) Bytes(op RvOp, n int) {
	if r != nil && op < NumRvOps && n > 0 {
		r.bytes[op].Add(float64(n))
	}
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
