package rendezvous

import "github.com/velo-go/velo/rendezvous/internal/rdmapath"

// The path decision of every transfer is made here and only here, on both
// roles, by the rules of package rdmapath: the owner's eight checks as it
// answers an acquire, the consumer's offer as it sends one, and the
// consumer's fallback to chunked exactly once. This build has no RDMA
// backend, so both sides hold rdmapath's zero values and every transfer is
// chunked, recorded as no_offer (owner) and not_configured (consumer).
// An RDMA backend fills paths in at New and supplies the slot's Region,
// the offer's place in the acquire body and the GET.
type paths struct {
	owner    rdmapath.Owner
	consumer rdmapath.Consumer
}

// answerAcquire decides the owner's answer to one acquire that took the
// lease rd names. The acquire body this build decodes carries no offer,
// and no slot here is in registered memory (Region is nil), so Decide
// never returns ok and the answer is always Ready; with a backend, an ok
// becomes the Rdma answer with the descriptor and the lease deadline.
func (r *Manager) answerAcquire(rd *ready) acquireAnswer {
	var offer *rdmapath.Offer
	_, why := r.paths.owner.Decide(offer, rdmapath.SlotFacts{Len: rd.TotalLen}, nil)
	r.met.PathDecision(why)
	return acquireAnswer{Ready: rd}
}

// beginTransfer builds the consumer's offer for one get, from local facts
// only, and records its reason when there is none. Whether the owner is
// on the backend's transport is a question for that backend; with none,
// the offer stops at not_configured before asking it.
func (r *Manager) beginTransfer() rdmapath.Transfer {
	offer, why := r.paths.consumer.Offer(nil)
	return rdmapath.Begin(r.met, offer, why) // r.met may be nil: its methods are nil-safe
}
