package hub

import (
	"context"
	"errors"
	"fmt"

	"github.com/velo-go/velo/ext"
	"github.com/velo-go/velo/hub/protocol"
	"github.com/velo-go/velo/hub/store"
)

// errUnsettled answers a registration whose write and read-back both went
// unanswered: the owner answers busy until the hub settles it.
var errUnsettled = protocol.Errorf(protocol.CodeUnavailable,
	"the store answered neither the write nor its read-back: the registration is settled later; retry")

// regRequest is what the HTTP handler hands to the registration task: the
// body it read (bounded) and the credential header, if any.
type regRequest struct {
	body []byte
	cred protocol.Credential
}

// register is the registration transaction, run as a task of the hub. It
// decodes and admits before it takes the lock, so a panic in any hook
// answers 500 and a payload that does not fit costs no lock.
func (h *Hub) register(q regRequest) (resp protocol.RegisterResponse, err error) {
	defer func() {
		if r := recover(); r != nil {
			h.log.Error("hub: registration panicked", "panic", r)
			err = protocol.Errorf(protocol.CodeInternal, "registration failed")
		}
	}()
	req, err := h.admit(q)
	if err != nil {
		return resp, err
	}
	unlock, err := h.acquire()
	if err != nil {
		return resp, err
	}
	defer unlock()
	return h.transact(req, q.cred)
}

// admit decodes the body and runs each extension's Admit: every failure
// here is the client's (400, or 401 for a malformed credential).
func (h *Hub) admit(q regRequest) (protocol.RegisterRequest, error) {
	req, err := protocol.DecodeRegisterRequest(q.body)
	if err != nil {
		return req, err
	}
	if err := h.checkAddress(req.Peer); err != nil {
		return req, err
	}
	for _, name := range h.cfg.RegistrationRequires {
		if _, ok := req.Extensions[name]; !ok {
			return req, protocol.Errorf(protocol.CodeBadRequest, "register: this hub requires the %q payload", name)
		}
	}
	for name := range req.Extensions {
		if h.plan.find(name) == nil {
			return req, protocol.Errorf(protocol.CodeBadRequest, "register: this hub has no extension %q", name)
		}
	}
	owner := req.Peer.InstanceID
	for _, e := range h.plan.exts {
		if err := e.Admit(owner, req.Extensions[e.Name()]); err != nil {
			var pe *protocol.Error
			if errors.As(err, &pe) {
				return req, pe
			}
			return req, protocol.Errorf(protocol.CodeBadRequest, "extension %s: %v", e.Name(), err)
		}
	}
	if q.cred != "" && !q.cred.Valid() {
		return req, protocol.Errorf(protocol.CodeUnauthorized, "the credential header is malformed")
	}
	if h.st.Continuity() != store.Live {
		return req, protocol.Errorf(protocol.CodeUnavailable, "the hub's store is %s: no registrations", h.st.Continuity())
	}
	return req, nil
}

// checkAddress reads the peer's address before the lock, when the hub
// runs velo: an address that names no transport the hub's node speaks
// could never be registered as a velo peer, and finding that after the
// store write would fail the registration after its write (and again on
// each retry). Without velo the hub stores the address unread.
func (h *Hub) checkAddress(p ext.PeerInfo) error {
	if h.veloOp == nil {
		return nil
	}
	if len(p.Address) == 0 {
		return protocol.Errorf(protocol.CodeBadRequest, "register: the peer has no address")
	}
	if h.node == nil {
		return nil
	}
	for k := range p.Address {
		if _, ok := h.transports[k]; ok {
			return nil
		}
	}
	return protocol.Errorf(protocol.CodeBadRequest, "register: the peer's address names no transport this hub speaks")
}

// begin decides, under the lock, what kind of registration this is and
// makes the owner busy. It answers the grant it replaced and the busy
// grant it published (for the undo), and the incarnation the write
// expects.
type begun struct {
	prev, busy *grant
	expect     store.Incarnation
	renewal    bool
	recovered  bool
}

func (h *Hub) begin(owner ext.InstanceID, cred protocol.Credential) (begun, error) {
	if h.pinned != nil && owner == h.pinned.Peer.InstanceID {
		return begun{}, protocol.Errorf(protocol.CodeUnauthorized, "the instance id is the hub's own")
	}
	var b begun
	b.prev = h.auth.get(owner)
	switch {
	case b.prev == nil:
	case b.prev.kind == grantBusy:
		return b, errBusy
	case b.prev.kind == grantLive:
		if cred == "" || !sameCredential(b.prev, cred) {
			return b, protocol.Errorf(protocol.CodeUnauthorized, "the instance is registered: present its current credential")
		}
		b.renewal, b.expect = true, b.prev.lease.Incarnation
	case b.prev.kind == grantReserved:
		if cred == "" || !matchesDigest(b.prev.digests, cred) {
			return b, protocol.Errorf(protocol.CodeUnauthorized, "the instance is reserved: present its credential")
		}
		b.recovered, b.expect = true, b.prev.lease.Incarnation
	}
	var lease Lease
	if b.prev != nil {
		lease = b.prev.lease
	}
	b.busy = &grant{kind: grantBusy, lease: lease}
	h.auth.put(owner, b.busy)
	return b, nil
}

// undo gives back the prior registration after a failure before the
// store write: nothing of it changed. A removal that revoked the owner
// meanwhile wins (the swap fails).
func (h *Hub) undo(owner ext.InstanceID, b begun) {
	if b.prev == nil {
		h.auth.dropIf(owner, b.busy)
		return
	}
	h.auth.swap(owner, b.busy, b.prev)
}

// transact runs under the registration lock: begin, prepare, write,
// commit, credential, on_registered.
func (h *Hub) transact(req protocol.RegisterRequest, cred protocol.Credential) (protocol.RegisterResponse, error) {
	owner := req.Peer.InstanceID
	b, err := h.begin(owner, cred)
	if err != nil {
		return protocol.RegisterResponse{}, err
	}
	h.inTx.Store(&owner)
	defer h.inTx.Store(nil)
	regs := h.registrations(req, b.renewal)
	staged, err := h.prepare(regs)
	if err != nil {
		h.undo(owner, b)
		return protocol.RegisterResponse{}, err
	}
	minted := protocol.NewCredential()
	rec := store.Record{Peer: req.Peer, Epoch: regs[0].Epoch, Extensions: req.Extensions,
		Credentials: []protocol.CredentialDigest{minted.Digest()}}
	if cred != "" {
		rec.Credentials = append(rec.Credentials, cred.Digest())
	}
	op := store.NewOpID()
	inc, err := h.write(owner, op, rec, b.expect)
	if err != nil {
		abortAll(staged)
		switch {
		case errors.Is(err, errWroteUnknown) && inc != 0:
			// The store's view shows the write: it applied. Settle as
			// after a write.
			return h.failAfterWrite(owner, inc, cred != "", rec, nil, err)
		case errors.Is(err, errWroteUnknown):
			// Fail closed: the owner stays busy until a read-back answers.
			h.settles.push(unsettled{owner: owner, op: op, rec: rec, b: b, presented: cred != ""})
			return protocol.RegisterResponse{}, errUnsettled
		}
		h.undo(owner, b)
		return protocol.RegisterResponse{}, err
	}
	for i := range regs {
		regs[i].Incarnation = inc
	}
	if err := h.afterWrite(owner, req, regs, staged); err != nil {
		return h.failAfterWrite(owner, inc, cred != "", rec, regs, err)
	}
	h.auth.put(owner, &grant{kind: grantLive, lease: Lease{Incarnation: inc, Epoch: rec.Epoch}, cred: credOf(minted)})
	if err := h.onRegistered(regs); err != nil {
		return h.failAfterWrite(owner, inc, cred != "", rec, regs, err)
	}
	h.chg.notify()
	return protocol.RegisterResponse{Credential: minted, Epoch: rec.Epoch, HubID: h.id,
		HubPeer: h.hubPeer(), Recovered: b.recovered, HeartbeatIntervalMS: h.probeIntervalMS()}, nil
}

// registrations builds what each extension is told, in start order, each
// with its own payload.
func (h *Hub) registrations(req protocol.RegisterRequest, renewal bool) []Registration {
	epoch := h.nextEpoch()
	regs := make([]Registration, len(h.plan.exts))
	for i, e := range h.plan.exts {
		regs[i] = Registration{Owner: req.Peer.InstanceID, Peer: req.Peer, Epoch: epoch,
			Payload: req.Extensions[e.Name()], Renewal: renewal}
	}
	return regs
}

// nextEpoch draws the registration's epoch: greater than every earlier
// one of this hub, and than every epoch in the store at startup.
func (h *Hub) nextEpoch() protocol.Epoch { return protocol.Epoch(h.epoch.Add(1)) }

// prepare runs each extension's Prepare under step_timeout_ms. On a
// failure it aborts what was staged, so the prior registration is not
// changed.
func (h *Hub) prepare(regs []Registration) ([]Staged, error) {
	staged := make([]Staged, 0, len(regs))
	for i, e := range h.plan.exts {
		r := &regs[i]
		s, err := step(context.Background(), h.cfg.stepTimeout(),
			func(ctx context.Context) (Staged, error) { return e.Prepare(ctx, r) },
			func(s Staged, _ error) { // answered after its deadline
				if s != nil {
					safeAbort(s)
				}
			})
		if err == nil && s == nil {
			err = fmt.Errorf("hub: extension %s: Prepare gave no Staged value", e.Name())
		}
		if err != nil {
			abortAll(staged)
			return nil, asProtocol("prepare of extension "+e.Name(), err)
		}
		staged = append(staged, s)
	}
	return staged, nil
}

func abortAll(staged []Staged) {
	for i := len(staged) - 1; i >= 0; i-- {
		safeAbort(staged[i])
	}
}

func safeAbort(s Staged) {
	defer func() { _ = recover() }()
	s.Abort()
}

// afterWrite registers the velo peer and commits each extension. A panic
// in a Commit fails the registration (after the write) and aborts the
// values not committed yet.
func (h *Hub) afterWrite(owner ext.InstanceID, req protocol.RegisterRequest, regs []Registration, staged []Staged) error {
	if h.rem.removedAt(owner, regs[0].Incarnation) {
		abortAll(staged)
		return errors.New("hub: the entry was removed as it was written")
	}
	if h.node != nil {
		if err := h.node.RegisterPeer(req.Peer); err != nil {
			abortAll(staged)
			return fmt.Errorf("hub: velo register peer: %w", err)
		}
	}
	for i, s := range staged {
		if err := safeCommit(s, &regs[i]); err != nil {
			abortAll(staged[i+1:])
			return fmt.Errorf("hub: extension %s: commit: %w", h.plan.exts[i].Name(), err)
		}
	}
	return nil
}

func safeCommit(s Staged, r *Registration) (err error) {
	defer func() {
		if p := recover(); p != nil {
			err = &panicError{val: p}
		}
	}()
	s.Commit(r)
	return nil
}

// onRegistered runs each extension's OnRegistered under step_timeout_ms.
// One that overruns is left running (it was told to spawn what waits);
// one that panics fails the registration.
func (h *Hub) onRegistered(regs []Registration) error {
	for i, e := range h.plan.exts {
		r := &regs[i]
		err := stepDo(context.Background(), h.cfg.stepTimeout(), func(ctx context.Context) error {
			e.OnRegistered(ctx, r)
			return nil
		})
		var pe *panicError
		if errors.As(err, &pe) {
			return fmt.Errorf("hub: extension %s: on_registered: %w", e.Name(), err)
		}
		if err != nil {
			h.log.Warn("hub: on_registered overran step_timeout_ms", "extension", e.Name(), "instance", r.Owner)
		}
	}
	return nil
}

// failAfterWrite settles a registration that failed after its store
// write: it refuses the credential, removes the new entry, delivers
// on_removed and forgets the velo peer; the client registers again. When
// the entry cannot be removed and the registrant presented a credential,
// the entry stays reserved and the answer is recovered, so the client
// keeps the one credential that can recover it.
func (h *Hub) failAfterWrite(owner ext.InstanceID, inc store.Incarnation, presented bool, rec store.Record, _ []Registration, cause error) (protocol.RegisterResponse, error) {
	h.log.Warn("hub: registration failed after its store write", "instance", owner, "err", cause)
	if inc != 0 {
		h.auth.revoke(owner, inc)
	}
	removed := inc != 0 && h.removeEntry(owner, inc)
	if removed {
		h.deliverRemoval(owner, inc)
		return protocol.RegisterResponse{}, protocol.Errorf(protocol.CodeRegisterAgain, "the registration failed after its write and was removed: register again without a credential")
	}
	h.deliverToExtensions(owner, inc)
	if presented && inc != 0 {
		h.auth.put(owner, &grant{kind: grantReserved, lease: Lease{Incarnation: inc, Epoch: rec.Epoch}, digests: rec.Credentials})
		return protocol.RegisterResponse{}, protocol.Errorf(protocol.CodeRecovered, "the registration failed after its write: register again presenting the credential")
	}
	return protocol.RegisterResponse{}, protocol.Errorf(protocol.CodeRegisterAgain, "the registration failed after its write: register again without a credential")
}
