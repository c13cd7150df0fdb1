package rdmapath

import (
	"errors"
	"fmt"
	"strings"
	"sync/atomic"

	"github.com/velo-go/velo/metrics"
)

// KillSwitchEnv forces the RDMA path off on both roles when affirmative.
const KillSwitchEnv = "VELO_RDMA_RENDEZVOUS_DISABLE"

// KillSwitch reports whether a value of KillSwitchEnv is affirmative:
// 1, true, yes or on, in any case. Anything else leaves the path on; a
// typo then shows as the absence of kill_switch in the metric.
func KillSwitch(v string) bool {
	switch strings.ToLower(v) {
	case "1", "true", "yes", "on":
		return true
	}
	return false
}

// Consumer is the consumer's side of the path decision. The zero value
// has no RDMA registry, so it never offers.
type Consumer struct {
	Backend  string // the registry's backend ("ucx"); "" for none
	Disabled bool   // the kill switch
}

// Offer builds the offer for one acquire from local facts only; it asks
// the owner nothing. ownerOnBackend reports whether the owner is
// registered here on a transport whose key is the backend's: the GET
// rides this node's own endpoint to the owner, so that is the whole
// condition (an owner not registered yet offers nothing, and its first
// get is chunked). A nil offer comes with its reason.
func (c *Consumer) Offer(ownerOnBackend func(key string) bool) (*Offer, Reason) {
	switch {
	case c.Backend == "":
		return nil, metrics.RdmaNotConfigured
	case c.Disabled:
		return nil, metrics.RdmaKillSwitch
	case ownerOnBackend == nil || !ownerOnBackend(c.Backend):
		return nil, metrics.RdmaNoOffer
	}
	return &Offer{Backends: []string{c.Backend}}, metrics.RdmaOK
}

// Errors of a transfer's path.
var (
	// ErrUnaskedRdma: the owner answered Rdma to an acquire that carried
	// no offer. After a fallback that means a broken owner, and retrying
	// would turn it into a storm of round trips, so the get fails.
	ErrUnaskedRdma = errors.New("rendezvous: the owner answered RDMA to an acquire that made no offer")
	// ErrNoRdmaToFail: a failure reported outside an RDMA GET; the
	// chunked path has no fallback.
	ErrNoRdmaToFail = errors.New("rendezvous: no RDMA transfer to fall back from")
	// ErrGrantSpent: a descriptor's key was taken for a second GET.
	ErrGrantSpent = errors.New("rendezvous: the descriptor was used already")
)

// Recorder takes path decisions; *metrics.RendezvousMetrics is one.
type Recorder interface {
	PathDecision(metrics.RdmaPathReason)
}

type transferState uint8

const (
	acquiring transferState = iota // an acquire is out; Offer says whether it offered
	getting                        // the owner answered Rdma, the GET runs
	chunked                        // the owner answered Ready
	done                           // the GET completed
	broken                         // the owner answered Rdma unasked
)

// Transfer is the consumer's path state for one get. It falls back to the
// chunked path exactly once: a failed GET (or a descriptor or destination
// it cannot use) re-acquires with no offer, and a second Rdma answer after
// that is the owner's fault, not a reason to try again.
//
// Begin, Answer, Fail and Done record into the Recorder the book's
// consumer reasons: the offer's (not_configured, kill_switch, no_offer),
// the failure's (decode_error, pool_exhausted, get_failed) and ok when a
// GET completes. A Transfer is used by one goroutine.
type Transfer struct {
	rec      Recorder
	offer    *Offer
	state    transferState
	fellBack bool
}

// Begin starts a transfer with the offer (and its reason) from
// Consumer.Offer, recording the reason when there is no offer.
func Begin(rec Recorder, offer *Offer, why Reason) Transfer {
	if offer == nil {
		rec.PathDecision(why)
	}
	return Transfer{rec: rec, offer: offer}
}

// Offer is what the current acquire carries: nil after a fallback.
func (t *Transfer) Offer() *Offer { return t.offer }

// FellBack reports whether the transfer fell back to the chunked path.
func (t *Transfer) FellBack() bool { return t.fellBack }

// Answer takes the owner's answer to the current acquire: rdma for an
// Rdma answer, else Ready. An Rdma answer nobody asked for fails.
func (t *Transfer) Answer(rdma bool) error {
	if t.state != acquiring {
		return ErrNoRdmaToFail
	}
	switch {
	case !rdma:
		t.state = chunked
	case t.offer == nil:
		t.state = broken
		return ErrUnaskedRdma
	default:
		t.state = getting
	}
	return nil
}

// Fail reports why the RDMA answer could not be used (decode_error,
// pool_exhausted, get_failed). It records the reason and readies the
// fallback: the caller detaches the lease and acquires again with Offer()
// (now nil). It returns an error, and changes nothing, when no GET was in
// hand to fail.
func (t *Transfer) Fail(why Reason) error {
	if t.state != getting {
		return ErrNoRdmaToFail
	}
	t.rec.PathDecision(why)
	t.offer, t.state, t.fellBack = nil, acquiring, true
	return nil
}

// Done marks the transfer complete; a completed GET records ok.
func (t *Transfer) Done() {
	if t.state == getting {
		t.rec.PathDecision(metrics.RdmaOK)
	}
	t.state = done
}

// Grant holds a decoded descriptor for exactly one GET: the key is
// unpacked just before the GET and destroyed after it, so no rkey outlives
// its operation (a stale key with perfect framing aborts the process on
// InfiniBand). Take hands the descriptor out once; a replay gets
// ErrGrantSpent before anything reaches the backend.
type Grant struct {
	d     Descriptor
	spent atomic.Bool
}

// NewGrant decodes b for one GET and checks it against what the consumer
// knows: the backend it has and the size the owner stated, which must not
// exceed max (< 0: no limit). A refusal that matches ErrBadDescriptor is
// a decode_error fallback; ErrPayloadOverLimit is not: the payload is
// refused on either path, so the caller releases the handle and fails.
// The key is copied, so b may be reused.
func NewGrant(b []byte, backend uint8, max int64) (*Grant, error) {
	d, err := Decode(b)
	if err != nil {
		return nil, err
	}
	if d.Backend != backend {
		return nil, fmt.Errorf("%w %d: this consumer has %d", ErrUnknownBackend, d.Backend, backend)
	}
	if max >= 0 && d.Len > uint64(max) {
		return nil, ErrPayloadOverLimit
	}
	d.Rkey = append([]byte(nil), d.Rkey...)
	return &Grant{d: d}, nil
}

// ErrPayloadOverLimit: the descriptor states more bytes than the consumer takes.
var ErrPayloadOverLimit = errors.New("rendezvous: the descriptor states more than the payload limit")

// Take returns the descriptor for the one GET it is good for.
func (g *Grant) Take() (Descriptor, error) {
	if g.spent.Swap(true) {
		return Descriptor{}, ErrGrantSpent
	}
	return g.d, nil
}
