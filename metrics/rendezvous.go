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
	NumRvOps
)

var rvOpNames = [NumRvOps]string{"register", "metadata", "get", "ref", "detach", "release", "acquire", "pull", "expire"}

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
}

// Rendezvous returns the handle of the Rendezvous family (the same one on
// every call); nil on a nil *VeloMetrics.
func (m *VeloMetrics) Rendezvous() *RendezvousMetrics {
	if m == nil {
		return nil
	}
	m.rvOnce.Do(func() {
		r := &RendezvousMetrics{active: m.rvActive}
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

// ActiveSlots sets the number of staged slots.
func (r *RendezvousMetrics) ActiveSlots(n int) {
	if r != nil {
		r.active.Set(float64(n))
	}
}
