package rendezvous

import (
	"time"

	"github.com/velo-go/velo/ext"
	"github.com/velo-go/velo/metrics"
	"github.com/velo-go/velo/rendezvous/internal/rdmapath"
)

// The path decision of every transfer is made here and only here, on both
// roles, by the rules of package rdmapath: the owner's eight checks as it
// answers an acquire, the consumer's offer as it sends one, and the
// consumer's fallback to chunked exactly once (get, with Transfer). A
// Manager without an RDMA registry holds rdmapath's zero values, so every
// transfer is chunked, recorded as no_offer (owner) and not_configured
// (consumer); with one, setupRDMA fills them in.
type paths struct {
	owner    rdmapath.Owner
	consumer rdmapath.Consumer
}

// answerAcquire decides the owner's answer to one acquire that took the
// lease rd names, with the consumer's offer (nil: none) and a hold on the
// slot's staging (nil: the slot is in plain memory), which it ends. On ok
// the lease becomes an RDMA lease with the configured deadline, before
// the answer goes out; a lease already gone (its slot's time-to-live)
// refuses the acquire as not found.
func (r *Manager) answerAcquire(rd *ready, offer *rdmaOffer, hold *pinHold) (acquireAnswer, bool) {
	var o *rdmapath.Offer
	if offer != nil {
		o = &rdmapath.Offer{Backends: offer.Backends}
	}
	facts := rdmapath.SlotFacts{Len: rd.TotalLen}
	if hold != nil {
		facts.Region = stagingRegion{st: hold.st, code: r.rdma.code}
	}
	desc, why := r.paths.owner.Decide(o, facts, nil)
	r.st.unpin(hold)
	if why == metrics.RdmaOK {
		lease := r.paths.owner.LeaseTimeout
		if !r.st.armRDMA(rd.LeaseID, lease) {
			return acquireAnswer{}, false
		}
		r.met.PathDecision(why)
		ms := uint64((lease + time.Millisecond - 1) / time.Millisecond)
		return acquireAnswer{Rdma: &rdmaAnswer{LeaseID: rd.LeaseID, Descriptor: desc, LeaseTimeoutMS: ms}}, true
	}
	r.met.PathDecision(why)
	return acquireAnswer{Ready: rd}, true
}

// beginTransfer builds the consumer's offer for one get, from local facts
// only, and records its reason when there is none: the owner must be
// registered here on the backend's transport, since the GET rides this
// node's own endpoint to it.
func (r *Manager) beginTransfer(owner ext.WorkerID) rdmapath.Transfer {
	var onBackend func(key string) bool
	if r.rdma != nil {
		be := r.rdma.be
		onBackend = func(key string) bool { return key == be.Name() && be.Reachable(owner) }
	}
	offer, why := r.paths.consumer.Offer(onBackend)
	return rdmapath.Begin(r.met, offer, why) // r.met may be nil: its methods are nil-safe
}
